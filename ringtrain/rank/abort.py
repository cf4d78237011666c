"""Abort this process's collectives from outside the thread they block: the ring's sockets.

Horovod 0.28.1 over Gloo has no abort. A rank whose background thread waits in a collective
for a live peer waits for Gloo's timeout (``HOROVOD_GLOO_TIMEOUT_SECONDS``, 30 s by default),
and ``hvd.shutdown()`` waits for that thread: after one rank of three was killed, the survivor
that read from the other survivor (not from the dead rank) sat 30 s in ``recv`` while its
peer, already resetting, kept its sockets open. What Gloo does have: a pair whose socket reads
end-of-file raises on every buffer pending on it, on both ends.

So a rank remembers which sockets ``hvd.init()`` opened (``remember``: this process's sockets
before and after the call, each by descriptor *and* inode) and, when the ring must form again,
shuts them down (``abort``): its own pending collectives fail at once, and so do its peers'
that wait on it. The process, its imports and its in-memory state stay. ``shutdown(2)`` leaves
the descriptor to its owner (Gloo closes it when the context goes), and a descriptor whose
inode changed (closed, then reused by a newer ring's socket) is left alone: an abort can only
ever reach the ring it was meant for.

A ring that is still forming (``hvd.init`` running: ``forming``) can be aborted too. A peer
lost while the Gloo contexts form left every survivor waiting for its connection (Gloo's pair
waits, with ringtrain's Horovod, one Gloo timeout: 30 s by default). The sockets ``hvd.init``
has opened so far (its pairs' listeners and connections) are shut down: the listener's
``accept`` fails, Gloo raises, ``hvd.init`` fails (ringtrain's Horovod patch) and the reset
runs again at once. A forming ring is doomed (``abort_forming``): what its init opens is shut
down until the init ends, for a process that joins that round after the loss (a new process
filling a slot) opens its pairs later. Connections to Horovod's rendezvous server are left
alone: its HTTP store gives up after three failed requests, outside any handler.

Who aborts: ``ringtrain.keras.memory.reset`` before it shuts Horovod down (the rank's own
failure: the others that wait on it fail too), and the rank agent when the launcher says a
rank of this ring is lost (``abort`` on the control channel: a rank that noticed nothing, a
host whose link went down), or a rank of the ring forming now (``ring`` names the generation
after this rank's last). Standard library only, like the rest of ``ringtrain.rank``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

__all__ = ["abort", "abort_forming", "forming", "generation", "open_sockets", "remember",
           "ring_sockets"]

_LOCK = threading.Lock()
# forming: the sockets open when the running hvd.init() began (None: none runs)
_RING: dict[str, object] = {"sockets": {}, "generation": 0, "forming": None}


def open_sockets() -> dict[int, int]:
    """This process's open sockets: descriptor -> inode (from /proc/self/fd)."""
    found: dict[int, int] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (or the listing's own descriptor)
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            with contextlib.suppress(ValueError):
                found[int(name)] = int(target[8:-1])
    return found


def ring_sockets(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """The sockets a call opened and kept: in ``after`` and not (with that inode) in
    ``before``. Pure."""
    return {fd: ino for fd, ino in after.items() if before.get(fd) != ino}


def remember(before: dict[int, int], after: dict[int, int]) -> int:
    """Called around ``hvd.init()``: its sockets are the ring's from now on (a newer ring's
    replace an older one's). A call that opened none formed no ring (``hvd.init()`` again on
    an initialised Horovod does nothing): the ring stays. Returns the ring's generation (1
    for the first ``init``)."""
    ring = ring_sockets(before, after)
    with _LOCK:
        if ring:
            _RING["sockets"] = ring
            _RING["generation"] = generation() + 1
        return generation()


def forming(before: dict[int, int] | None) -> None:
    """``hvd.init()`` begins with ``before`` open (its sockets from now on are the forming
    ring's), or ended without a ring (None)."""
    with _LOCK:
        _RING["forming"] = before


def generation() -> int:
    """How many rings this process has formed (``hvd.init`` calls that returned)."""
    value = _RING["generation"]
    return value if isinstance(value, int) else 0


def abort(want: int | None = None) -> int:
    """Shut down the ring's sockets (both ways), when the ring is generation ``want`` (None:
    whichever is current), or the one forming when ``want`` is the next generation and an
    ``hvd.init()`` runs (what it opened so far but its rendezvous requests; the forming state
    stays, as it may open more). Returns how many were shut down; 0 when none is left, the
    ring is another, or ``hvd.init`` never returned here."""
    with _LOCK:
        if want is not None and want == generation() + 1:
            return len(_shut_forming(set()))
        if want is not None and want != generation():
            return 0
        ring = _RING["sockets"]
        _RING["sockets"] = {}
    return len(_shut(ring if isinstance(ring, dict) else {}, None))


def abort_forming(want: int, limit_s: float, every_s: float = 0.05) -> int:
    """The forming ring ``want`` is doomed (a rank of its round was lost): shut down what the
    ``hvd.init()`` running now opens, at once and every ``every_s`` until that init ends or
    ``limit_s`` has passed (a pair's sockets appear once the round's rank assignment comes),
    each socket once. A later init (the reset's next try) is never touched. Returns how many
    were shut down; 0 when no init runs or the ring is another. Blocks: the rank agent runs
    it in a thread."""
    with _LOCK:
        running = _RING["forming"]
    if running is None:
        return 0
    deadline = time.monotonic() + limit_s
    done: set[tuple[int, int]] = set()
    while time.monotonic() < deadline:
        with _LOCK:
            if _RING["forming"] is not running or want != generation() + 1:
                break  # that init ended (failed, or formed a ring)
            done |= _shut_forming(done)
        time.sleep(every_s)
    return len(done)


def _shut_forming(done: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Under the lock: shut down what the running ``hvd.init()`` opened and is not in
    ``done`` (descriptor, inode), but its rendezvous requests; what was shut down."""
    before = _RING["forming"]
    if not isinstance(before, dict):
        return set()
    opened = {fd: ino for fd, ino in ring_sockets(before, open_sockets()).items()
              if (fd, ino) not in done}
    return _shut(opened, rendezvous_server())


def _shut(ring: dict[int, int], skip: tuple[str, int] | None) -> set[tuple[int, int]]:
    """Shut down each socket of ``ring`` (descriptor -> inode) still that socket, both ways,
    but one connected to ``skip``; the (descriptor, inode) pairs shut down."""
    shut: set[tuple[int, int]] = set()
    for fd, inode in ring.items():
        with contextlib.suppress(OSError):
            mine = os.dup(fd)
            try:
                if os.fstat(mine).st_ino != inode:
                    continue  # closed and reused since: not the ring's any more
                # a socket object over the duplicate; shutdown acts on the socket itself
                with socket.socket(fileno=mine) as sock:
                    mine = -1  # the socket object closes the duplicate
                    if skip is not None and _peer(sock) == skip:
                        continue
                    sock.shutdown(socket.SHUT_RDWR)
                    shut.add((fd, inode))
            finally:
                if mine >= 0:
                    os.close(mine)
    return shut


def rendezvous_server() -> tuple[str, int] | None:
    """Horovod's rendezvous server (its HTTP store), from the variables its driver sets."""
    addr = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
    port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "")
    return (addr, int(port)) if addr and port.isdigit() else None


def _peer(sock: socket.socket) -> tuple[str, int] | None:
    try:
        peer = sock.getpeername()
    except OSError:  # a listener, or not connected
        return None
    return (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
