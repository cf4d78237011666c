"""Reading /proc: the one place that knows its formats. Standard library only, no I/O but reads.

Used where ringtrain must identify processes exactly (by PID *and* start time, so a recycled PID
is never mistaken for ours) and by the rank agent, which must stay cheap to import.
"""

from __future__ import annotations

import os

# what /proc/PID/comm says of Open MPI's daemon (orted; prted under PRRTE), the ranks' parent
DAEMON_NAMES = ("orted", "prted")


def read(path: str) -> bytes:
    """The file's bytes, or b"" when it cannot be read (the process is gone, no permission)."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def stat_fields(pid: int | str) -> list[str]:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, ...]; [] if gone.

    The command name is in parentheses and may itself contain spaces and ')', hence rsplit.
    """
    stat = read(f"/proc/{pid}/stat").decode(errors="replace")
    return stat.rsplit(")", 1)[1].split() if ")" in stat else []


def state(pid: int) -> str:
    fields = stat_fields(pid)
    return fields[0] if fields else ""


def is_zombie(pid: int) -> bool:
    return state(pid) == "Z"


def parent(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def start_time(pid: int | str) -> int | None:
    """Start time in clock ticks since boot (field 22 of stat); None when the process is gone."""
    fields = stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def started_at(pid: int | str = "self") -> float | None:
    """When the process started, in seconds since the epoch (the boot time in /proc/stat plus
    its start in clock ticks); None when either cannot be read."""
    ticks = start_time(pid)
    boot = [line.split()[1] for line in read("/proc/stat").decode(errors="replace").splitlines()
            if line.startswith("btime ")]
    if ticks is None or not boot or not boot[0].isdigit():
        return None
    return int(boot[0]) + ticks / os.sysconf("SC_CLK_TCK")


def comm(pid: int) -> str:
    return read(f"/proc/{pid}/comm").decode(errors="replace").strip()


def cmdline(pid: int) -> str:
    return read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def argv(pid: int) -> list[str]:
    """The process's arguments, one string each ([] when it is gone)."""
    raw = read(f"/proc/{pid}/cmdline")
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def environ_has(pid: int, entry: bytes) -> bool:
    """Whether ``NAME=VALUE`` (exactly) is in the process's environment."""
    return entry in read(f"/proc/{pid}/environ").split(b"\0")


def uts_namespace(pid: int | str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        found += [int(p) for p in read(f"/proc/{pid}/task/{task}/children").split()]
    return found


def pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def ssh_session_of(daemon: int) -> int | None:
    """The sshd session process (``sshd: user@notty``) that started the Open MPI daemon, maybe
    through a shell, when it carries that daemon alone (not a multiplexed connection)."""
    child, pid = daemon, parent(daemon)
    for _ in range(3):
        if pid <= 1 or children(pid) != [child]:
            return None
        name = comm(pid)
        if name == "sshd":
            return pid if cmdline(pid).startswith("sshd: ") else None
        if name not in ("sh", "bash", "dash", "zsh"):
            return None
        child, pid = pid, parent(pid)
    return None
