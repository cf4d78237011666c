"""The S3 test server's process (SeaweedFS ``weed``): alive, stopped or killed, and reaped;
only a PID that still runs weed is signalled."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time

from ringtrain.rank import procfs

log = logging.getLogger(__name__)
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # servers this process started (to reap)


def alive(pid: int) -> bool:
    """The server is running (a child of ours not yet exited, or a live non-zombie PID)."""
    child = CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not procfs.is_zombie(pid)  # a zombie is not alive


def is_weed(pid: int) -> bool:
    """``pid`` still runs weed (not a PID recycled for something else)."""
    return b"weed" in procfs.read(f"/proc/{pid}/cmdline").split(b"\0")[0]


def stop_pid(pid: int, *, timeout: float = 15.0) -> None:
    """SIGTERM the server, SIGKILL after ``timeout``; only if that PID is still a weed."""
    if not alive(pid) or not is_weed(pid):
        _reap(pid)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        log.warning("S3 server pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout)
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def kill_pid(pid: int) -> None:
    """SIGKILL the server at once (fault tests: a storage outage without a goodbye)."""
    if alive(pid) and is_weed(pid):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    child = CHILDREN.pop(pid, None)
    if child is not None:
        child.wait(timeout=30)
