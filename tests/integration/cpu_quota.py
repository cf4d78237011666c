"""Slow one process down for a test: a CPU quota through a cgroup of the test's own (cgroup v2's
cpu.max, or v1's cpu.cfs_quota_us), the way a noisy neighbour or a thermally throttled host
slows a rank. Only the process given is moved; it goes back to its cgroup when the quota is
lifted, and the test's cgroup is removed."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

V2 = Path("/sys/fs/cgroup")
V1_CPU = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def _v2_usable() -> bool:
    controllers = V2 / "cgroup.controllers"
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def unavailable() -> str | None:
    """Why no cgroup CPU quota can be set here, or None."""
    if os.geteuid() != 0:
        return "a cgroup CPU quota needs root"
    if _v2_usable() or (V1_CPU / "cpu.cfs_quota_us").is_file():
        return None
    return "no cgroup cpu controller (neither v2 cpu.max nor v1 cpu.cfs_quota_us)"


def _cgroup_of(pid: int) -> Path:
    """The process's cgroup directory on the hierarchy in use."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        if _v2_usable() and hier == "0":
            return V2 / path.lstrip("/")
        if not _v2_usable() and "cpu" in controllers.split(","):
            return V1_CPU / path.lstrip("/")
    return V2 if _v2_usable() else V1_CPU


@contextlib.contextmanager
def cpu_quota(proc: psutil.Process, fraction: float, name: str) -> Iterator[None]:
    """Hold ``proc`` (all its threads) to ``fraction`` of one CPU until the block ends."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    home = _cgroup_of(proc.pid)
    if _v2_usable():
        group = V2 / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{int(PERIOD_US * fraction)} {PERIOD_US}")
    else:
        group = V1_CPU / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(PERIOD_US * fraction)))
    try:
        (group / "cgroup.procs").write_text(str(proc.pid))
        yield
    finally:
        with contextlib.suppress(OSError):  # the process may have ended
            (home / "cgroup.procs").write_text(str(proc.pid))
        with contextlib.suppress(OSError):
            for tid in (group / "cgroup.procs").read_text().split():
                (home / "cgroup.procs").write_text(tid)
        group.rmdir()


def find_rank(script: Path, rank: int) -> psutil.Process | None:
    """The process running ``script`` (a path unique to the test) as Open MPI rank ``rank``."""
    for proc in psutil.process_iter():
        try:
            if str(script) in " ".join(proc.cmdline()) and proc.environ().get(
                    "OMPI_COMM_WORLD_RANK") == str(rank):
                return proc
        except psutil.Error:
            continue
    return None
