"""rank/abort.py on real sockets: the ring is what ``hvd.init`` opened, and an abort from
another thread fails a ``recv`` blocked on it, and its peer's, at once."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from ringtrain.rank import abort


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()
    abort.abort()  # nothing of a test's ring left for the next


def _pair(server: socket.socket) -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair: (this end, the peer's end)."""
    mine = socket.create_connection(server.getsockname())
    theirs, _ = server.accept()
    return mine, theirs


def test_ring_sockets_are_those_opened_and_kept_by_the_call() -> None:
    before = {3: 100, 4: 101, 7: 102}
    after = {3: 100, 4: 205, 8: 206}  # 4 closed and reused by the call, 7 closed, 8 new
    assert abort.ring_sockets(before, after) == {4: 205, 8: 206}


def test_an_abort_from_another_thread_ends_a_blocked_recv_on_both_ends(
        listener: socket.socket) -> None:
    """What Horovod's background thread meets: it waits in recv on a live peer; the abort
    (the launcher's word, or the rank's own reset) comes from another thread. A socket
    older than the ring (the control channel) is left as it is."""
    control, control_peer = _pair(listener)
    before = abort.open_sockets()
    ring, peer = _pair(listener)
    generation = abort.remember(before, abort.open_sockets())
    assert ring.fileno() in abort.ring_sockets(before, abort.open_sockets())
    got: list[bytes] = []
    blocked = threading.Thread(target=lambda: got.append(ring.recv(10)))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # waiting on a peer that sends nothing

    assert abort.abort(generation) >= 1
    blocked.join(5)
    assert not blocked.is_alive() and got == [b""]  # end-of-file now, not a timeout
    peer.settimeout(5)
    assert peer.recv(10) == b""  # the peer's pending read ends too
    control.sendall(b"hb\n")  # the older socket still works
    assert control_peer.recv(10) == b"hb\n"
    assert abort.abort(generation) == 0  # once
    for s in (control, control_peer, ring, peer):
        s.close()


def test_an_abort_for_an_older_ring_leaves_the_newer_one_alone(
        listener: socket.socket) -> None:
    before = abort.open_sockets()
    old, old_peer = _pair(listener)
    first = abort.remember(before, abort.open_sockets())
    old.close()
    before = abort.open_sockets()
    new, new_peer = _pair(listener)
    second = abort.remember(before, abort.open_sockets())
    assert second == first + 1 == abort.generation()
    assert abort.abort(first) == 0  # the launcher knew this rank in the older ring
    new.sendall(b"x")
    assert new_peer.recv(1) == b"x"
    for s in (old_peer, new, new_peer):
        s.close()


def test_a_descriptor_closed_and_reused_since_is_not_the_rings(
        listener: socket.socket) -> None:
    """Gloo closed the ring's socket and something else got its number: same descriptor,
    another inode, left alone."""
    before = abort.open_sockets()
    ring, ring_peer = _pair(listener)
    number = ring.fileno()
    generation = abort.remember(before, abort.open_sockets())
    other, other_peer = _pair(listener)
    os.dup2(other.fileno(), number)  # the number now names another socket
    assert abort.abort(generation) == 1  # the peer's end (opened in the same call here) only
    os.write(number, b"y")
    assert other_peer.recv(1) == b"y"
    for s in (ring, ring_peer, other, other_peer):
        s.close()


def test_an_init_that_opened_nothing_leaves_the_ring_as_it_is(listener: socket.socket) -> None:
    """``hvd.init()`` called again on an initialised Horovod does nothing: the ring it formed
    before is still the one to abort."""
    before = abort.open_sockets()
    ring, peer = _pair(listener)
    generation = abort.remember(before, abort.open_sockets())
    again = abort.open_sockets()
    assert abort.remember(again, abort.open_sockets()) == generation
    assert abort.abort(generation) >= 1
    peer.settimeout(5)
    assert peer.recv(1) == b""
    for s in (ring, peer):
        s.close()


def test_a_forming_ring_is_aborted_by_the_next_generation_and_its_listener_wakes(
        listener: socket.socket) -> None:
    """A peer lost while ``hvd.init`` forms the ring: Gloo's pair waits in epoll on its
    listener for the dead peer's connection. The launcher names the ring after this rank's
    last; what the init opened so far is shut down, epoll reports the listener, its
    ``accept`` fails (Gloo raises: the init fails at once). The formed ring is left alone."""
    import select
    import time

    before = abort.open_sockets()
    ring, ring_peer = _pair(listener)
    generation = abort.remember(before, abort.open_sockets())
    assert abort.abort(generation + 1) == 0  # no init runs: nothing forms
    abort.forming(abort.open_sockets())
    pair = socket.create_server(("127.0.0.1", 0))  # a Gloo pair's listener
    pair.setblocking(False)
    poller = select.epoll()
    poller.register(pair.fileno(), select.EPOLLIN)
    seen: list[list[tuple[int, int]]] = []
    waiter = threading.Thread(target=lambda: seen.append(poller.poll(10)))
    waiter.start()
    time.sleep(0.1)
    began = time.monotonic()
    assert abort.abort(generation + 1) == 1  # the listener, not the formed ring
    waiter.join(5)
    assert seen and seen[0] and time.monotonic() - began < 1, seen
    with pytest.raises(OSError):
        pair.accept()
    ring.sendall(b"z")  # the ring formed before still works
    assert ring_peer.recv(1) == b"z"
    abort.forming(None)
    assert abort.abort(generation + 1) == 0
    poller.close()
    for s in (pair, ring, ring_peer):
        s.close()


def test_a_doomed_round_shuts_what_its_init_opens_later_but_not_the_rendezvous(
        listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that joined a doomed round: its pairs' listeners appear after the launcher's
    word (once the round's assignment comes). ``abort_forming`` shuts them as they appear,
    leaves the connection to Horovod's rendezvous server alone (its HTTP store gives up after
    three failed requests, outside any handler), and stops when that init ends: the next
    init is never touched."""
    import time

    rendezvous = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", str(rendezvous.getsockname()[1]))
    abort.forming(abort.open_sockets())
    want = abort.generation() + 1
    result: list[int] = []
    doomer = threading.Thread(target=lambda: result.append(abort.abort_forming(want, 10)))
    doomer.start()
    time.sleep(0.2)
    store = socket.create_connection(rendezvous.getsockname())  # an HTTP store request
    pair = socket.create_server(("127.0.0.1", 0))  # a pair's listener, opened late
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            pair.setblocking(False)
            pair.accept()
        except BlockingIOError:
            time.sleep(0.02)  # still listening
        except OSError:
            break  # shut down
    else:
        pytest.fail("the late listener was not shut down")
    store.sendall(b"GET")  # the rendezvous connection still works
    served, _ = rendezvous.accept()
    assert served.recv(3) == b"GET"
    abort.forming(None)  # that init failed
    doomer.join(2)
    assert not doomer.is_alive() and result and result[0] >= 1
    abort.forming(abort.open_sockets())  # the reset's next init
    again = socket.create_server(("127.0.0.1", 0))
    time.sleep(0.2)
    again.setblocking(False)
    with pytest.raises(BlockingIOError):
        again.accept()  # listening, untouched
    abort.forming(None)
    for s in (rendezvous, store, pair, served, again):
        s.close()
