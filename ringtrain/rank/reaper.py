"""Find and end one job's processes on this host: ``python -m ringtrain.rank.reaper RUN_ID``.

A process belongs to the job when either
  * its environment holds ``RINGTRAIN_RUN_ID=<RUN_ID>`` (every rank gets it, and so does anything a
    rank starts), or
  * it is a PID the ranks reported (their Open MPI daemon) *and* its start time still matches,
    so a recycled PID is never touched.
Only processes in this host's UTS namespace count (on the simulated cluster all hosts share one
kernel; on real hosts this is every process). Never matches by name; never ``pkill -f``.

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
import signal
import socket
import sys
import time
from typing import Any

from ringtrain.rank import envvars, procfs, secretfile

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


def find(run_id: str, pids: dict[int, int]) -> list[tuple[int, str]]:
    """Processes of job ``run_id`` on this host; ``pids`` maps reported PID -> start time."""
    marker = f"{envvars.RUN_ID}={run_id}".encode()
    me, my_uts = os.getpid(), procfs.uts_namespace("self")
    found = []
    for pid in procfs.pids():
        if pid == me:
            continue
        listed = pid in pids and procfs.start_time(pid) == pids[pid]
        # the namespace check (a readlink) only for the few processes that match
        if (listed or procfs.environ_has(pid, marker)) and procfs.uts_namespace(pid) == my_uts:
            found.append((pid, procfs.cmdline(pid)))
    return found


def reap(run_id: str, pids: dict[int, int], kill: bool, wait_s: float = 3.0) -> dict[str, Any]:
    found = find(run_id, pids)
    left = found
    removed = secretfile.remove_run(run_id) if kill else 0
    if kill and found:
        for pid, _ in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + wait_s
        while True:
            left = [(p, c) for p, c in find(run_id, pids) if not procfs.is_zombie(p)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    return {"host": socket.gethostname(), "found": found, "left": left,
            "secrets_removed": removed}


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
