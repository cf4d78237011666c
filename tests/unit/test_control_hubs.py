"""The control server and a host's hub (rank/hub.py, issue 41), over a real socket: the hub
speaks the protocol by hand here (hello with ``role: hub``, challenge, auth, then sealed
join/ev/beat/left). What a hub may say is bounded as what a rank may say: only ranks of its own
host, inside the job, one rank per connection number; whatever else it sends is dropped."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from ringtrain.launch.control import hubs
from ringtrain.launch.control.server import ControlServer
from ringtrain.rank.events import HUB_ROLE, PROTOCOL, Seal, answer, decode, identity, session_key
from tests.unit.control_peer import read_line, say_hello

HOST = "h1"


def _wait(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


class FakeHub:
    """A hub's side, by hand."""

    def __init__(self, server: ControlServer, host: str = HOST) -> None:
        addr, port = server.address.rsplit(":", 1)
        self.sock = socket.create_connection((addr, int(port)), timeout=5)
        me = {"role": "hub", "host": host, "pid": 7, "start": 1}
        nonce = say_hello(self.sock, **me)
        line = read_line(self.sock)
        reply = answer(server.token, nonce, identity(me), line)
        assert reply is not None, line
        self.sock.sendall(reply)
        msg = decode(line)
        assert msg is not None
        key = session_key(server.token, nonce, msg["nonce"])
        self.inn, self.out = Seal(key, "launcher"), Seal(key, HUB_ROLE)

    def tell(self, kind: str, **fields: Any) -> None:
        self.sock.sendall(self.out.seal(kind, **fields))

    def join(self, c: int, rank: int, host: str = HOST, pid: int | None = None) -> None:
        self.tell("join", c=c, hello={"proto": PROTOCOL, "rank": rank, "host": host,
                                      "pid": pid or 100 + rank})

    def heard(self, kinds: tuple[str, ...] = ("to", "drop", "all"), within: float = 5.0
              ) -> list[dict[str, Any]]:
        """The launcher's messages of ``kinds`` within ``within`` seconds (beats skipped)."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + within
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                line = read_line(self.sock)
            except TimeoutError:
                continue
            if not line:
                break
            msg = self.inn.open(line)
            if msg is not None and msg["t"] in kinds:
                out.append(msg)
                break
        return out


@pytest.fixture
def server() -> Any:
    one = ControlServer(ranks=8, per_host=4)
    yield one
    one.close()


def _states(server: ControlServer) -> dict[int, Any]:
    return {r.rank: r for r in server.snapshot().ranks}


def test_a_hubs_ranks_check_in_age_by_its_beat_and_leave(server: ControlServer) -> None:
    hub = FakeHub(server)
    for c in range(3):
        hub.join(c, rank=c)
    assert _wait(lambda: sorted(_states(server)) == [0, 1, 2])
    hub.tell("beat", a=[[0, 0.0], [1, 30.0], [2, 0.0]], s=[])
    assert _wait(lambda: server.snapshot().now - _states(server)[1].last_heard > 29)
    assert server.snapshot().now - _states(server)[0].last_heard < 5
    hub.tell("left", c=2)
    assert _wait(lambda: not _states(server)[2].connected)
    assert _states(server)[0].connected
    hub.sock.close()  # the hub's connection ends: every rank it spoke for is gone
    assert _wait(lambda: not any(r.connected for r in server.snapshot().ranks))


def test_a_hub_speaks_for_its_own_hosts_ranks_inside_the_job_only(
        server: ControlServer, caplog: pytest.LogCaptureFixture) -> None:
    hub = FakeHub(server)
    hub.join(0, rank=3, host="h2")
    assert _dropped(hub, 0)
    hub.join(1, rank=99)  # outside ranks 0-7
    assert _dropped(hub, 1)
    hub.join(2, rank=4)
    assert _wait(lambda: sorted(_states(server)) == [4])
    assert "spoke for rank 3 on 'h2'" in caplog.text and "outside this job" in caplog.text


def _dropped(hub: FakeHub, c: int) -> bool:
    return any(m["t"] == "drop" and m["c"] == c for m in hub.heard())


def test_a_second_join_for_one_connection_number_drops_both(server: ControlServer) -> None:
    hub = FakeHub(server)
    hub.join(0, rank=0)
    assert _wait(lambda: 0 in _states(server))
    hub.join(0, rank=1)
    assert _dropped(hub, 0)
    assert _wait(lambda: not _states(server)[0].connected)
    assert 1 not in _states(server)
    hub.tell("left", c=0)  # the number speaks for nobody now
    time.sleep(0.3)
    assert not _states(server)[0].connected


def test_a_message_for_a_number_the_hub_never_joined_is_dropped(server: ControlServer) -> None:
    hub = FakeHub(server)
    hub.join(0, rank=0)
    assert _wait(lambda: 0 in _states(server))
    hub.tell("ev", c=5, k="done", f={})
    hub.tell("ev", c=0, k="forged_kind", f={})
    hub.tell("beat", a=[[5, 0.0], ["x", 1], [0]], s=[[5, {"n": 1}]])
    hub.tell("ev", c=0, k="init", f={"size": 1, "ring": 1})
    assert _wait(lambda: _states(server)[0].initialized)
    assert [r.rank for r in server.snapshot().ranks] == [0]
    assert not _states(server)[0].done


def test_the_launchers_word_for_a_rank_goes_to_its_hub_by_number(server: ControlServer) -> None:
    hub = FakeHub(server)
    hub.join(0, rank=0)
    hub.join(1, rank=1)
    for c in (0, 1):
        hub.tell("ev", c=c, k="init", f={"size": 2, "ring": 1})
    assert _wait(lambda: all(r.initialized for r in server.snapshot().ranks)
                 and len(server.snapshot().ranks) == 2)
    hub.tell("left", c=1)
    assert _wait(lambda: not _states(server)[1].connected)
    assert server.abort_ring(1) == 1  # rank 0's ring had rank 1
    (told,) = hub.heard(("to",))
    assert (told["c"], told["k"], told["f"]) == (0, "abort", {"ring": 1, "lost": 1})
    server.broadcast("stop")
    (everyone,) = hub.heard(("all",))
    assert everyone["k"] == "stop"


def test_a_hubs_hello_is_checked_as_a_ranks_and_names_no_rank() -> None:
    assert isinstance(hubs.read_hub_hello(
        {"t": "hello", "proto": PROTOCOL, "role": "hub", "rank": 0, "host": "h", "pid": 1,
         "nonce": "0" * 32}), str)
    old = hubs.read_hub_hello({"t": "hello", "proto": 1, "role": "hub", "host": "h", "pid": 1,
                               "nonce": "0" * 32})
    assert isinstance(old, str) and "protocol 1" in old and "the hub on" in old
    joined = hubs.read_join({"c": 0, "hello": {"rank": 0, "host": "h", "pid": 1}}, "h")
    assert isinstance(joined, str) and "protocol None" in joined  # the rank's own proto
    assert hubs.read_beat({"a": [[0, -1.0], [1, 0.5]], "s": "x"}) == ([(1, 0.5)], [])
    assert hubs.read_event({"c": 1, "k": "done", "f": {}}) == (1, {"t": "done"})
    assert hubs.read_event({"c": 1, "k": "hello", "f": {}}) is None  # not a rank's kind
