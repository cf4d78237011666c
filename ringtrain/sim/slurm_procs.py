"""Find the processes of a simulated Slurm cluster: its slurmstepd and every job process. Pure
reading of /proc; nothing here sends a signal (``ringtrain.sim.slurm`` stops what it finds)."""

from __future__ import annotations

import os
from pathlib import Path

from ringtrain.sim.proc import alive


def job_processes(state: Path) -> list[int]:
    """This cluster's slurmstepd (they hold a log file in ``state`` open), their descendants,
    and processes whose environment names this cluster's slurm.conf and a job id."""
    conf_marker = f"SLURM_CONF={state}/slurm.conf".encode()
    me = os.getpid()
    mine = {me, *_ancestors(me)}
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        pid = int(entry.name)
        parents[pid] = _ppid(pid)
        if _read(f"/proc/{pid}/comm").strip() == b"slurmstepd" and _holds_file_in(pid, state):
            found.add(pid)
            continue
        env = _read(f"/proc/{pid}/environ").split(b"\0")
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


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _stat_fields(pid: int) -> list[str]:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return stat.rsplit(")", 1)[1].split() if ")" in stat else []


def _ppid(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 and fields[0] != "Z" else None


def same_process(pid: int, start: int) -> bool:
    return start_time(pid) == start


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        pid = _ppid(pid)
        out.append(pid)
    return out
