"""Find and end one job's processes on this host: ``python -m ringtrain.rank.reaper RUN_ID``.

A process belongs to the job when either
  * its environment holds ``RINGTRAIN_RUN_ID=<RUN_ID>`` (every rank gets it, and so does anything a
    rank starts), or
  * it is a PID the ranks reported (their Open MPI daemon), its start time still matches, it is
    named ``orted`` or ``prted``, and it is the parent of a process of the first kind. A rank
    that reports another PID (any process with that name, sshd, init) cannot make it a job's.
Only processes in this host's UTS namespace count (on the simulated cluster all hosts share one
kernel; on real hosts this is every process). Never matches by name alone; never ``pkill -f``.

Each candidate is opened as a pidfd *before* it is checked, and signalled through that pidfd:
if its PID is recycled between the check and the kill, the signal goes to the process that was
checked (gone: nothing happens), never to the newcomer. On a kernel without pidfds (< 5.3) the
same checks are followed by ``os.kill``.

With ``--kill`` it sends SIGKILL to what it found, waits, and looks again, and removes the run's
secrets files (horovodrun --gloo, ``secretfile``). It prints one JSON object: ``{"host",
"found": [[pid, cmd], ...], "left": [[pid, cmd], ...], "secrets_removed": N}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from ringtrain.rank import envvars, procfs, secretfile

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    cmd: str
    fd: int | None  # a pidfd: this very process, whatever later happens to its PID


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone, or no pidfds here: checked, then os.kill
        return None


def _exited(proc: Proc) -> bool:
    if proc.fd is not None:  # a pidfd polls readable once its process has exited
        return bool(select.select([proc.fd], [], [], 0)[0])
    return procfs.is_zombie(proc.pid) or procfs.start_time(proc.pid) is None


def close(procs: list[Proc]) -> None:
    for p in procs:
        if p.fd is not None:
            with contextlib.suppress(OSError):
                os.close(p.fd)


def find(run_id: str, pids: dict[int, int]) -> list[Proc]:
    """Processes of job ``run_id`` on this host; ``pids`` maps reported PID -> start time.
    The caller closes them (``close``)."""
    marker = f"{envvars.RUN_ID}={run_id}".encode()
    me, my_uts = os.getpid(), procfs.uts_namespace("self")
    marked: list[Proc] = []
    for pid in procfs.pids():
        if pid == me or not procfs.environ_has(pid, marker):
            continue
        fd = _pidfd(pid)  # opened first: the checks below then speak for this process
        proc = Proc(pid, procfs.cmdline(pid), fd)
        if fd is not None and (not procfs.environ_has(pid, marker) or _exited(proc)):
            close([proc])  # the PID changed hands between the scan and the pidfd
            continue
        if procfs.uts_namespace(pid) == my_uts:
            marked.append(proc)
        else:
            close([proc])
    parents = {procfs.parent(p.pid) for p in marked}
    daemons: list[Proc] = []
    for pid, start in sorted(pids.items()):
        if pid in (me, 1) or pid not in parents or any(p.pid == pid for p in marked):
            continue
        fd = _pidfd(pid)
        proc = Proc(pid, procfs.cmdline(pid), fd)
        if (procfs.start_time(pid) == start and procfs.comm(pid) in procfs.DAEMON_NAMES
                and procfs.uts_namespace(pid) == my_uts and not _exited(proc)):
            daemons.append(proc)
        else:
            close([proc])
    return marked + daemons


def _kill(proc: Proc) -> None:
    with contextlib.suppress(OSError):
        if proc.fd is not None:
            signal.pidfd_send_signal(proc.fd, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)


def reap(run_id: str, pids: dict[int, int], kill: bool, wait_s: float = 3.0) -> dict[str, Any]:
    found = find(run_id, pids)
    left = found
    removed = secretfile.remove_run(run_id) if kill else 0
    seen = list(found)
    try:
        if kill and found:
            for proc in found:
                _kill(proc)
            deadline = time.monotonic() + wait_s
            while True:
                known = {s.pid for s in seen}
                looked = find(run_id, pids)
                close([p for p in looked if p.pid in known])  # the pidfds held already
                again = [p for p in looked if p.pid not in known]
                seen += again  # started by a rank while we killed: killed too
                for proc in again:
                    _kill(proc)
                left = [p for p in seen if not _exited(p)]
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        return {"host": socket.gethostname(), "found": [(p.pid, p.cmd) for p in found],
                "left": [(p.pid, p.cmd) for p in left], "secrets_removed": removed}
    finally:
        close(seen)


def parse_pid_specs(specs: list[str]) -> dict[int, int]:
    out = {}
    for spec in specs:
        pid, _, start = spec.partition(":")
        if pid.isdigit() and start.isdigit():
            out[int(pid)] = int(start)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_id")
    p.add_argument("--pid", action="append", default=[], metavar="PID:START")
    p.add_argument("--kill", action="store_true")
    args = p.parse_args(argv)
    if not RUN_ID_RE.match(args.run_id):
        sys.stderr.write(f"reaper: invalid run id {args.run_id!r}\n")
        return 2
    result = reap(args.run_id, parse_pid_specs(args.pid), args.kill)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
