"""Find the processes of a simulated Slurm cluster: its slurmstepd and every job process. Pure
reading of /proc; nothing here sends a signal (``ringtrain.sim.slurm`` stops what it finds)."""

from __future__ import annotations

import os
from pathlib import Path

from ringtrain.rank import procfs
from ringtrain.sim.proc import alive


def job_processes(state: Path) -> list[int]:
    """This cluster's slurmstepd (they hold a log file in ``state`` open), their descendants,
    and processes whose environment names this cluster's slurm.conf and a job id."""
    conf_marker = f"SLURM_CONF={state}/slurm.conf".encode()
    me = os.getpid()
    mine = {me, *_ancestors(me)}
    parents: dict[int, int] = {}
    found: set[int] = set()
    for pid in procfs.pids():
        if pid in mine:
            continue
        parents[pid] = procfs.parent(pid)
        if procfs.comm(pid) == "slurmstepd" and _holds_file_in(pid, state):
            found.add(pid)
            continue
        env = procfs.read(f"/proc/{pid}/environ").split(b"\0")
        if conf_marker in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env):
            found.add(pid)
    changed = True
    while changed:
        extra = {p for p, pp in parents.items() if pp in found and p not in found}
        found |= extra
        changed = bool(extra)
    return sorted(p for p in found if alive(p))


def _holds_file_in(pid: int, state: Path) -> bool:
    prefix = f"{state}/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def start_time(pid: int) -> int | None:
    """Start time of a live process; None for a zombie or a process that is gone."""
    return None if procfs.is_zombie(pid) else procfs.start_time(pid)


def same_process(pid: int, start: int) -> bool:
    return start_time(pid) == start


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        pid = procfs.parent(pid)
        out.append(pid)
    return out
