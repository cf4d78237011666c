"""The rank agent against a real control server, and against impostors at the launcher's
address, on loopback (issue 23): the launcher must prove the job's token before the agent hears
it; the token itself never goes on the wire; a line over the bound ends the connection; a
message the agent cannot use is dropped, never its reader thread."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.record.snapshot import Progress
from ringtrain.rank import agent as rankagent
from ringtrain.rank.agent import RankAgent
from ringtrain.rank.events import (
    MAX_LAUNCHER_LINE,
    Seal,
    decode,
    encode,
    identity,
    launcher_proof,
    rank_proof,
    session_key,
)

TOKEN = "0123456789abcdef0123456789abcdef"  # a test's
THEIRS = "f" * 32  # the launcher's nonce in the impostors' challenges


def _wait(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def heard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What agents did on the launcher's word: "preempt", or "die: <why>"."""
    out: list[str] = []
    monkeypatch.setattr(rankagent.preempt, "request", lambda: out.append("preempt"))
    return out


def _agent(address: str, token: str, heard: list[str], *, rank: int = 0,
           timeout: float = 30.0) -> RankAgent:
    """An agent whose ``_die`` is recorded instead (the real one kills the process). Set on
    the instance, not the class: the agent's threads outlive the test, and its dead-man
    switch must never reach the real one."""
    agent = RankAgent(address, token, rank=rank, launcher_timeout=timeout)
    agent._die = lambda why: heard.append(f"die: {why}")  # type: ignore[method-assign]
    return agent


class _Impostor:
    """Something at the launcher's address: reads the agent's hello, sends ``first(hello)``
    and ``then``, and records what comes back until the agent hangs up."""

    def __init__(self, first: Callable[[dict[str, Any]], bytes],
                 then: bytes | Callable[[dict[str, Any]], bytes] = b"") -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.raw_hello = b""
        self.after_hello: list[bytes] = []
        self.hung_up = threading.Event()
        self._first, self._then = first, then
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        sock, _ = self._server.accept()
        with sock, sock.makefile("rb") as stream:
            self.raw_hello = stream.readline()
            hello = decode(self.raw_hello)
            assert hello is not None
            with contextlib.suppress(OSError):
                then = self._then if isinstance(self._then, bytes) else self._then(hello)
                sock.sendall(self._first(hello) + then)
            with contextlib.suppress(OSError):
                for line in stream:
                    self.after_hello.append(line)
        self.hung_up.set()

    def close(self) -> None:
        self._server.close()


@contextlib.contextmanager
def _impostor(first: Callable[[dict[str, Any]], bytes],
              then: bytes | Callable[[dict[str, Any]], bytes] = b"") -> Iterator[_Impostor]:
    fake = _Impostor(first, then)
    try:
        yield fake
    finally:
        fake.close()


def _challenge(token: str) -> Callable[[dict[str, Any]], bytes]:
    """A launcher's challenge with the proof ``token`` gives for the hello's nonce."""
    return lambda hello: encode(
        "challenge", nonce=THEIRS,
        proof=launcher_proof(token, hello["nonce"], THEIRS, identity(hello)))


ORDERS = encode("stop") + encode("preempt") + encode("hb")


def _for(hello: dict[str, Any], token: str = TOKEN, sender: str = "launcher") -> Seal:
    return Seal(session_key(token, hello["nonce"], THEIRS), sender)


def _body(line: bytes) -> dict[str, Any]:
    """A message the agent sent: its JSON (a sealed one ends with a tab and its MAC)."""
    data: dict[str, Any] = json.loads(line.rstrip(b"\n").split(b"\t")[0])
    return data
IMPOSTORS = {
    "a proof without the token": _challenge("a guess"),
    "a proof for another hello (replayed)": lambda hello: encode(
        "challenge", nonce=THEIRS, proof=launcher_proof(TOKEN, "e" * 32, THEIRS, identity(hello))),
    "the rank's own proof sent back": lambda hello: encode(
        "challenge", nonce=THEIRS,
        proof=rank_proof(TOKEN, hello["nonce"], THEIRS, identity(hello))),
    "orders and no challenge": lambda hello: b"",
    "an over-long challenge": lambda hello: _challenge(TOKEN)(hello)[:-2] + b" " * 2000 + b"}\n",
}


@pytest.mark.parametrize("first", IMPOSTORS.values(), ids=IMPOSTORS.keys())
def test_whatever_answers_without_proving_the_token_is_no_launcher(
        first: Callable[[dict[str, Any]], bytes], heard: list[str]) -> None:
    """Before: the agent sent the token in its hello and obeyed the first "stop" it read. Now
    it hangs up, obeys nothing, tells nothing, and its dead-man switch ends the rank as for a
    launcher that never answered."""
    with _impostor(first, then=ORDERS) as fake:
        agent = _agent(fake.address, TOKEN, heard, rank=3, timeout=1.0)
        began = agent.last_heard
        assert agent.start()
        agent.send("done")  # dropped: nobody proved they should hear it
        assert fake.hung_up.wait(5)
        assert _wait(lambda: heard)
        assert heard[0].startswith("die: no word from the launcher")
        assert "preempt" not in heard
        assert agent.last_heard == began
        assert fake.after_hello == []
        hello = json.loads(fake.raw_hello)
        assert TOKEN.encode() not in fake.raw_hello and "token" not in hello
        assert (hello["t"], hello["rank"], hello["pid"]) == ("hello", 3, os.getpid())


def test_an_over_long_line_from_the_launcher_ends_the_connection(heard: list[str]) -> None:
    """Before: the agent read a line of any length, then obeyed the next one."""
    long_line = b'{"t":"hb","pad":"' + b"x" * (4 * MAX_LAUNCHER_LINE) + b'"}\n'
    with _impostor(_challenge(TOKEN), then=long_line + encode("preempt")) as fake:
        agent = _agent(fake.address, TOKEN, heard)
        assert agent.start()  # the proof was right: the agent answered it
        assert fake.hung_up.wait(5)
        assert [_body(line)["t"] for line in fake.after_hello][:1] == ["auth"]
        time.sleep(0.2)
        assert heard == []


def test_a_message_the_agent_cannot_use_is_dropped_and_the_reader_goes_on(
        heard: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a deeply nested line raised RecursionError in the reader thread, which died;
    the rank then heard nothing more and its dead-man switch ended it."""
    junk = (b"[" * 1015 + b"\n"  # under the line bound, over the parser's depth
            + b'{"t":5}\n' + b'{"t":"bogus"}\n'
            + b"\xff\xfe\n" + b"[1,2]\n" + encode("challenge", nonce=THEIRS, proof="x"))
    with _impostor(_challenge(TOKEN),
                   then=lambda hello: junk + _for(hello).seal("preempt")) as fake:
        agent = _agent(fake.address, TOKEN, heard)
        assert agent.start()
        assert _wait(lambda: heard == ["preempt"])
        assert not fake.hung_up.is_set()
        agent.send("progress", step=1)
        assert _wait(lambda: len(fake.after_hello) >= 2)
        assert _body(fake.after_hello[-1])["t"] in ("progress", "hb")
    assert capsys.readouterr().err.count("dropped a message from the launcher") == 1


def test_after_the_handshake_only_messages_sealed_for_this_connection_are_heard(
        heard: list[str]) -> None:
    """Whoever can rewrite the traffic between the hosts saw the handshake, not the token:
    plain orders, orders sealed with a guess, a sealed order sent again, and the rank's own
    sealed message sent back are all dropped; the one real order is obeyed once. The agent's
    own messages go out sealed, numbered upwards."""
    def then(hello: dict[str, Any]) -> bytes:
        real = _for(hello).seal("preempt")
        return (ORDERS + _for(hello, token="a guess").seal("stop") + real + real
                + _for(hello, sender="rank").seal("stop") + _for(hello).seal("hb"))
    with _impostor(_challenge(TOKEN), then=then) as fake:
        agent = _agent(fake.address, TOKEN, heard)
        assert agent.start()
        assert _wait(lambda: heard == ["preempt"])
        agent.send("progress", step=1)
        agent.send("progress", step=2)
        assert _wait(lambda: sum(b"progress" in line for line in fake.after_hello) == 2)
        time.sleep(0.2)
        assert heard == ["preempt"]  # no stop obeyed, the repeat not taken twice
        hello = decode(fake.raw_hello)
        assert hello is not None
        opened = _for(hello, sender="rank")  # the launcher's view of the rank's messages
        sent = [opened.open(line) for line in fake.after_hello[1:]]
        assert all(m is not None for m in sent)
        assert [m["step"] for m in sent if m and m["t"] == "progress"] == [1, 2]


def test_the_agent_and_the_launcher_prove_the_token_to_each_other(heard: list[str]) -> None:
    server = ControlServer()
    try:
        agent = _agent(server.address, server.token, heard)
        assert agent.start()
        assert _wait(lambda: [(r.rank, r.pid) for r in server.snapshot().ranks]
                     == [(0, os.getpid())])
        agent.send("progress", epoch=2, step=5)
        assert _wait(lambda: (server.snapshot().progress or Progress()).step == 5)
        server.broadcast("preempt")
        assert _wait(lambda: heard == ["preempt"])
        before = agent.last_heard
        assert _wait(lambda: agent.last_heard > before)  # the launcher's heartbeats
    finally:
        server.close()


class _Relabel:
    """A relay without the token between a rank and the launcher: it passes every line on,
    but says another rank (and PID) in the hello."""

    def __init__(self, launcher: str) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        host, port = launcher.rsplit(":", 1)
        self._launcher = (host, int(port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        rank, _ = self._server.accept()
        up = socket.create_connection(self._launcher)
        with rank, up, rank.makefile("rb") as stream:
            hello = json.loads(stream.readline())
            fields = {k: v for k, v in hello.items() if k != "t"} | {"rank": 1, "pid": 1}
            up.sendall(encode("hello", **fields))

            def down() -> None:
                with contextlib.suppress(OSError):
                    while data := up.recv(4096):
                        rank.sendall(data)
                with contextlib.suppress(OSError):
                    rank.shutdown(socket.SHUT_RDWR)

            threading.Thread(target=down, daemon=True).start()
            with contextlib.suppress(OSError):
                while data := stream.read1(4096):
                    up.sendall(data)

    def close(self) -> None:
        self._server.close()


def test_a_relay_without_the_token_cannot_relabel_a_rank(
        heard: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 40 item 4: the hello's rank, host and PIDs were covered by no proof, so a relay
    without the token could pass a rank off as another (and teardown would end the PID it
    named). Now the proofs cover them: the launcher's challenge, computed for the relabelled
    hello, proves nothing to the rank, which hangs up; the launcher lists no rank."""
    server = ControlServer()
    relay = _Relabel(server.address)
    try:
        agent = _agent(relay.address, server.token, heard, timeout=5.0)
        agent.start()
        assert _wait(lambda: "did not prove it holds the job's token" in capfd.readouterr().err
                     or agent._sock is None)
        time.sleep(0.3)
        assert server.snapshot().ranks == ()
        assert not agent._trusted.is_set()
    finally:
        relay.close()
        server.close()


def test_a_lost_rank_makes_the_launcher_tell_its_rings_survivors_to_abort(
        heard: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """--elastic: rank 0 is gone; rank 1, which formed ring 3 before rank 0's last word, is
    told to abort ring 3; rank 2, whose ring formed after that (so without rank 0), and
    rank 3, which formed none, are not told."""
    aborted: list[tuple[int, int | None]] = []
    monkeypatch.setattr(rankagent.abort, "abort",
                        lambda want=None: aborted.append((os.getpid(), want)) or 2)
    server = ControlServer()
    try:
        agents = [_agent(server.address, server.token, heard, rank=r) for r in range(4)]
        for agent in agents:
            assert agent.start()
        assert _wait(lambda: len(server.snapshot().ranks) == 4)
        agents[1].send("init", size=4, local_rank=0, hvd_rank=1, ring=3)
        assert _wait(lambda: {r.rank: r.ring for r in server.snapshot().ranks}[1] == 3)
        agents[0].send("progress", step=1)  # rank 0's last word
        assert _wait(lambda: (server.snapshot().progress or Progress()).step == 1)
        time.sleep(0.05)
        agents[2].send("init", size=3, local_rank=0, hvd_rank=0, ring=2)
        assert _wait(lambda: {r.rank: r.ring for r in server.snapshot().ranks}[2] == 2)
        assert server.abort_ring(0) == 1
        assert _wait(lambda: aborted == [(os.getpid(), 3)])
        time.sleep(0.2)
        assert aborted == [(os.getpid(), 3)]  # nobody else
    finally:
        server.close()


def test_a_check_in_closed_before_its_challenge_is_tried_again(heard: list[str]) -> None:
    """Issue 40: one address holds every place it may hold before the handshake (idle
    connections); the agent's check-in from there is closed at once. The idle ones are closed
    after ``IDLE_S``; the agent, connecting again with a new nonce, is heard."""
    server = ControlServer(ranks=1, per_host=1)
    host, port = server.address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port))) for _ in range(server.max_per_source)]
    try:
        assert _wait(lambda: len(server._pending) == server.max_per_source)
        agent = _agent(server.address, server.token, heard, rank=0)
        assert agent.start()
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [0], timeout=15)
        assert server.refused > server.max_per_source  # the agent's first try among them
        assert heard == []  # never hung up, never its dead-man switch
    finally:
        for sock in idle:
            sock.close()
        server.close()


def test_an_agent_gives_up_after_its_tries_and_says_why(
        heard: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Something at the address that closes every connection unheard: a bounded number of
    tries, then the agent hangs up (its dead-man switch ends the rank later)."""
    monkeypatch.setattr(rankagent, "RETRY_PAUSE_S", (0.01, 0.02))
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def close_all() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            sock.close()

    threading.Thread(target=close_all, daemon=True).start()
    try:
        agent = _agent(f"127.0.0.1:{listener.getsockname()[1]}", TOKEN, heard, timeout=1.0)
        agent.start()
        assert _wait(lambda: "before its challenge" in capsys.readouterr().err, timeout=10)
        assert len(accepted) == rankagent.CHECKIN_TRIES
    finally:
        listener.close()
