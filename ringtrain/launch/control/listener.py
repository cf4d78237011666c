"""The control server's listening socket, and the descriptors its connections need.

Supervision holds one connection, so one file descriptor, per rank. Most systems start a
process with a soft limit of 1,024 descriptors (the hard limit is often far higher): a job of
a few hundred 8-GPU hosts passed it, and ``accept`` then failed with EMFILE, every rank past
the limit was never heard (reported as never started) while the server's loop spun on a
listening socket it could not take from. So before it listens the server makes room
(``room``, pure; ``make_room`` applies it): the soft limit goes up, as far as the hard limit
allows, to ``wanted`` (twice the ranks, since as many may be checking in again during a flood,
and ``SPARE`` for the SSH fan-out, logs and pipes beside them). Where even the hard limit
cannot hold one connection per rank and ``LEAST_SPARE``, the launch stops before any rank
starts, saying which limit to raise. If ``accept`` still runs out (another part of the
process holds more than planned), the listener stops listening for ``PAUSE_S`` and says so,
instead of spinning.

Select-based waits cannot take descriptors past 1,024 at all (``select.select`` raises
ValueError): the launcher's own waits use poll or epoll (remote/ssh.py, selectors).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import resource
import selectors
import socket
import time
from collections.abc import Iterator

from ringtrain.errors import SetupError
from ringtrain.launch.control.admission import LISTEN_BACKLOG

log = logging.getLogger(__name__)

SPARE = 512  # descriptors beside the ranks' connections: SSH fan-out, logs, pipes
# ... below which a launch is refused: it could not even hold its ranks (an 8-rank job under
# a hard limit of 256 still runs; its SSH fan-out may run short, and is told so)
LEAST_SPARE = 64
PAUSE_S = 0.5  # out of descriptors: how long the listener rests before it tries again
# accept's errors that a wait cures (out of descriptors, of kernel memory): the listener rests
_SHORT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def wanted(ranks: int) -> int:
    return 2 * ranks + SPARE


def room(ranks: int, soft: int, hard: int, hoped: int = 0) -> tuple[int | None, str | None]:
    """(the soft limit to set, None where ``soft`` is enough; why ``ranks`` connections
    cannot be held, None where they can). ``hoped``: connections there may be beyond those
    (under --control-hubs a rank with no hub checks in on its own), room made for them as
    far as the hard limit allows, never a refusal. ``resource.RLIM_INFINITY`` (-1) is no
    limit. Pure."""
    unlimited = resource.RLIM_INFINITY
    if hard != unlimited and ranks + LEAST_SPARE > hard:
        return None, (f"{ranks:,} control connections need at least "
                      f"{ranks + LEAST_SPARE:,} open files in the launcher (one a rank; under "
                      f"--control-hubs one a host), and this process may open {hard:,}")
    want = wanted(max(ranks, hoped))
    if soft == unlimited or want <= soft:
        return None, None
    new = want if hard == unlimited else min(hard, want)
    return (new if new > soft else None), None


def make_room(ranks: int, hoped: int = 0) -> None:
    """Raise this process's soft descriptor limit for ``ranks`` connections (``room``), or
    stop the launch with the fix where the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new, why = room(ranks, soft, hard, hoped)
    if why is not None:
        raise SetupError(why, "raise the launching user's hard limit (as root: ulimit -Hn N "
                         "in the shell that launches, nofile in /etc/security/limits.conf, or "
                         "LimitNOFILE= for a systemd service), launch fewer ranks, or supervise "
                         "through one connection a host (--control-hubs on)")
    if new is not None:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError) as err:  # a system cap under the hard limit (macOS)
            raise SetupError(f"{ranks:,} control connections need {new:,} open files in the "
                             f"launcher, and the system refused this process that many ({err})",
                             "raise the system's per-process cap, or launch fewer ranks"
                             ) from err
        log.info("open-file limit raised from %d to %d for %d control connections", soft, new,
                 ranks)
    if hard != resource.RLIM_INFINITY and wanted(ranks) > hard:
        log.warning("%d control connections leave %d of this process's %d open files for SSH "
                    "and logs: some hosts' commands may fail for want of one (raise the hard "
                    "limit)", ranks, hard - ranks, hard)


class Listener:
    """A listening TCP socket on ``bind`` (any free port), non-blocking, registered with
    ``selector`` (data None) while it may accept."""

    def __init__(self, bind: str, selector: selectors.BaseSelector) -> None:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((bind, 0))
        self.sock.listen(LISTEN_BACKLOG)
        self.sock.setblocking(False)
        port = int(self.sock.getsockname()[1])
        self.address = f"[{bind}]:{port}" if family == socket.AF_INET6 else f"{bind}:{port}"
        self.port = port
        self._selector = selector
        self._resting_until: float | None = None
        self.exhausted = 0  # times accept ran out of descriptors
        selector.register(self.sock, selectors.EVENT_READ, None)

    def accept(self) -> Iterator[tuple[socket.socket, tuple[str, int]]]:
        """Every connection waiting now."""
        while True:
            try:
                yield self.sock.accept()
            except OSError as err:  # nothing more now (BlockingIOError), or closed
                if err.errno in _SHORT_OF:
                    self._rest(err)
                return

    def _rest(self, err: OSError) -> None:
        self.exhausted += 1
        if self._resting_until is None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self.sock)
        self._resting_until = time.monotonic() + PAUSE_S
        if self.exhausted == 1 or self.exhausted % 100 == 0:
            log.warning("control server: %s (%d times): connections wait in the backlog "
                        "until it can take them", err.strerror or err, self.exhausted)

    def wake(self) -> None:
        """Listen again once a rest is over (from the loop, each turn)."""
        if self._resting_until is not None and time.monotonic() >= self._resting_until:
            try:
                self._selector.register(self.sock, selectors.EVENT_READ, None)
            except KeyError:  # registered already
                pass
            except (ValueError, OSError) as err:  # closed, or the kernel refused: next turn
                self._resting_until = time.monotonic() + PAUSE_S
                log.warning("control server: cannot listen again yet (%s)", err)
                return
            self._resting_until = None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
