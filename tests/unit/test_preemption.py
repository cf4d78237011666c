"""A preemption notice over a real control server on loopback: ``preempt`` reaches the rank,
rank 0's ``preempt_committed`` comes back, and the wait is bounded."""

from __future__ import annotations

import socket
import threading
import time

from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.recover.preemption import Preemption, ask_commit
from ringtrain.rank.events import Seal
from tests.unit.control_peer import answer_challenge, say_hello


def _rank(server: ControlServer, *, checkpoints: bool, answer: bool
          ) -> tuple[socket.socket, Seal]:
    host, port = server.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    out, inn = answer_challenge(sock, server.token, say_hello(sock, rank=0, host="h", pid=42))
    if checkpoints:
        sock.sendall(out.seal("api", checkpoint="file:///tmp/c", progress=True))

    def read() -> None:
        with sock.makefile("rb") as stream:
            for line in stream:
                msg = inn.open(line)
                if msg is not None and msg["t"] == "preempt" and answer:
                    sock.sendall(out.seal("preempt_committed", epoch=3, step=117))
                    return

    threading.Thread(target=read, daemon=True).start()
    return sock, out


def _until(condition: object) -> None:
    deadline = time.monotonic() + 5
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def _ask(*, checkpoints: bool, answer: bool, wait_s: float) -> Preemption:
    """A real control server, one rank connected over loopback, then the preemption notice."""
    server = ControlServer()
    try:
        sock, _ = _rank(server, checkpoints=checkpoints, answer=answer)
        _until(server.commits_checkpoints if checkpoints else lambda: server.snapshot().ranks)
        got = ask_commit(server, "SIGUSR1", wait_s=wait_s)
        sock.close()
    finally:
        server.close()
    return got


def test_rank_0_commits_and_says_so() -> None:
    got = _ask(checkpoints=True, answer=True, wait_s=10)
    assert got.committed == (3, 117) and got.asked and got.waited_s < 10
    assert got.describe().startswith("preempted (SIGUSR1): rank 0 committed step 117 (epoch 3")


def test_a_script_without_checkpoints_is_not_waited_for() -> None:
    got = _ask(checkpoints=False, answer=True, wait_s=10)
    assert not got.asked and got.committed is None and got.waited_s == 0.0
    assert "commits no checkpoints" in got.describe()
    assert not ask_commit(None, "SIGUSR1").asked  # between attempts: nothing to ask


def test_the_wait_for_a_silent_rank_0_is_bounded() -> None:
    got = _ask(checkpoints=True, answer=False, wait_s=0.5)
    assert got.asked and got.committed is None and 0.5 <= got.waited_s < 3
    assert "rank 0 committed nothing within" in got.describe()
    assert "the last committed checkpoint stands" in got.describe()


def test_a_commit_said_before_the_notice_does_not_count() -> None:
    """Only an answer to this notice ends the wait: a ``preempt_committed`` sent earlier (a
    stale or forged one) is dropped when the notice goes out."""
    server = ControlServer()
    try:
        sock, out = _rank(server, checkpoints=True, answer=False)
        sock.sendall(out.seal("preempt_committed", epoch=1, step=5))
        _until(lambda: server.preempt_commit is not None)
        got = ask_commit(server, "SIGUSR1", wait_s=0.5)
        sock.close()
    finally:
        server.close()
    assert got.asked and got.committed is None
