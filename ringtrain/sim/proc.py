"""Processes: run a command (argv only), find processes by network namespace, stop them by PID."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ringtrain.errors import SimError
from ringtrain.rank import procfs
from ringtrain.sim.config import RUN_DIR

log = logging.getLogger(__name__)


def run(
    argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (never through a shell) and return its output; SimError when it fails."""
    log.debug("run: %s", " ".join(argv))
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as err:
        raise SimError(
            f"{argv[0]} not found",
            hint="apt-get install -y iproute2 openssh-server openssh-client util-linux",
        ) from err
    except subprocess.TimeoutExpired as err:
        raise SimError(
            f"{' '.join(argv)} did not finish in {timeout} s",
            hint="see `ringtrain -vv sim ...` for the commands run",
        ) from err
    if check and done.returncode != 0:
        raise SimError(
            f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}",
            hint="run `ringtrain sim down` to clear a half-built cluster, then retry",
        )
    return done


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """A machine-wide lock (flock) so concurrent up/down calls do not interleave."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(RUN_DIR / f"{name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def netns_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a network namespace file (/run/netns/X or /proc/PID/ns/net)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_in_netns(ns_path: Path) -> list[int]:
    """Every live process whose network namespace is the one at ``ns_path``."""
    target = netns_id(ns_path)
    if target is None:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and netns_id(Path(entry.path) / "ns" / "net") == target:
            found.append(int(entry.name))
    return sorted(found)


def pid_in_netns(pid: int, ns_path: Path) -> bool:
    target = netns_id(ns_path)
    return target is not None and netns_id(Path(f"/proc/{pid}/ns/net")) == target


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    state = procfs.state(pid)
    return state not in ("", "Z")


def stop_pids(pids: Sequence[int], *, grace: float = 1.5) -> list[int]:
    """SIGTERM, wait up to ``grace`` s, then SIGKILL. Returns the PIDs still alive after that."""
    me = os.getpid()
    pids = [p for p in pids if p != me]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if alive(p)]
            if pids:
                time.sleep(0.01)
        if not pids:
            break
    return pids
