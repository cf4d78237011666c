"""Horovod's elastic driver hears that a host is lost when its ssh session to it ends.

Under ``--elastic`` horovodrun runs each worker as ``ssh HOST COMMAND`` (through ringtrain's
shim, launchers.ssh_shim) and records the worker failed only when that ssh exits. For a host
whose link went down, that is when ssh's keepalive gives up (``ServerAliveInterval`` x
``ServerAliveCountMax``: 15-25 s), and until then its barrier holds every survivor's re-form.
ringtrain already knows sooner (the host's ranks silent past ``--heartbeat-timeout``), so it
ends those ssh clients itself (``cut``): the driver records the failure at once, blacklists
the host and forms the ring again with the survivors, whom the launcher told to abort the old
one (control.abort_ring). The processes are horovodrun's own descendants only, each matched
by name and by the host as a whole argument, and signalled through a pidfd opened before the
second look, so a recycled PID is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal

from ringtrain.rank import procfs

__all__ = ["cut", "descendants"]


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, theirs, ...), parents before children."""
    found: list[int] = []
    todo = [root]
    while todo:
        kids = procfs.children(todo.pop())
        found += kids
        todo += kids
    return found


def cut(root: int, host: str) -> int:
    """End the ssh clients below ``root`` (horovodrun) that reach ``host``; how many."""
    ended = 0
    for pid in descendants(root):
        argv = procfs.argv(pid)
        if procfs.comm(pid) != "ssh" or host not in argv[1:]:
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone meanwhile
            continue
        try:
            if procfs.argv(pid) == argv:  # the same process the pidfd holds
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                ended += 1
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    return ended
