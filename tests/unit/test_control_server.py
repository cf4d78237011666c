"""The control server on loopback: authenticate first (both ways), bounded reads, capped and
timed-out unauthenticated connections (a peer that can reach the port is not trusted), one
connection per rank, each speaking for its own rank only."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

import ringtrain
from ringtrain.launch.control import hubs
from ringtrain.launch.control.admission import LISTEN_BACKLOG
from ringtrain.launch.control.rounds import DoomedRound, joined, ring_to_abort
from ringtrain.launch.control.server import MAX_PENDING, ControlServer
from ringtrain.launch.record.snapshot import Progress, RankState
from ringtrain.rank.events import (
    MAX_LINE,
    PROTOCOL,
    RANK_EVENTS,
    decode,
    encode,
    identity,
    launcher_proof,
    rank_proof,
)
from ringtrain.rank.relay import FORWARDED
from tests.unit.control_peer import answer_challenge, check_in, read_line, say_hello


def _connect(server: ControlServer) -> socket.socket:
    host, port = server.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    """The server closed the connection within ``within`` seconds (a connection it keeps
    gets heartbeats: a deadline, not a quiet spell, ends the wait)."""
    deadline = time.monotonic() + within
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _wait(condition: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_rank_with_the_token_is_heard_one_without_is_dropped() -> None:
    server = ControlServer()
    try:
        good = _connect(server)
        check_in(good, server.token, rank=0, host="h", pid=42)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [0])
        bad = _connect(server)  # a peer that guesses: its auth is refused
        nonce = say_hello(bad, rank=1, host="h", pid=43)
        theirs = json.loads(read_line(bad))["nonce"]
        bad.sendall(encode("auth", proof=rank_proof("guess", nonce, theirs,
                                                    identity({"rank": 1, "host": "h", "pid": 43}))))
        assert _closed_by_peer(bad, 5)
        old_style = _connect(server)  # the token itself, in the hello, is not an auth
        old_style.sendall(encode("hello", token=server.token, rank=2, host="h", pid=44,
                                 nonce="a" * 32) + encode("hb"))
        assert _closed_by_peer(old_style, 5)
        noise = _connect(server)
        noise.sendall(b"GET / HTTP/1.1\r\n\r\n")  # not a hello: dropped at once
        assert _closed_by_peer(noise, 5)
        assert [r.rank for r in server.snapshot().ranks] == [0]
    finally:
        server.close()


def test_an_endless_line_is_cut_off_not_buffered() -> None:
    server = ControlServer()
    try:
        sock = _connect(server)
        chunk = b"x" * 65536
        sent = 0
        try:
            while sent < 64 * MAX_LINE:  # 4 MiB, far over the limit, and no newline
                sock.sendall(chunk)
                sent += len(chunk)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the server closed the connection while we were still sending: good
        assert _closed_by_peer(sock, 5)
    finally:
        server.close()


def test_a_flood_of_idle_connections_stays_bounded_and_times_out() -> None:
    server = ControlServer(hello_timeout=1.0)
    before = threading.active_count()
    socks = []
    try:
        for _ in range(300):
            socks.append(_connect(server))
        assert _wait(lambda: server.refused >= 300 - MAX_PENDING)
        assert threading.active_count() - before <= MAX_PENDING + 2  # not one per connection
        # the silent ones that were let in are closed once the hello timeout passes
        assert _wait(lambda: server.refused == 300, timeout=15)
        assert _wait(lambda: threading.active_count() - before <= 2)
        rank = _connect(server)  # and a real rank still gets in afterwards
        check_in(rank, server.token, rank=3, host="h", pid=7)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [3])
    finally:
        for s in socks:
            s.close()
        server.close()


def test_every_rank_of_a_large_job_may_check_in_at_once() -> None:
    """The flood bound is MAX_PENDING or the job's size: 300 ranks connecting at the same
    moment (none has said hello yet) are all kept."""
    server = ControlServer(ranks=300)
    socks = []
    try:
        host, port = server.address.rsplit(":", 1)
        socks = [socket.create_connection((host, int(port))) for _ in range(300)]
        nonces: list[str] = []
        for rank, sock in enumerate(socks):
            nonces.append(say_hello(sock, rank=rank, host="h", pid=rank))
        for sock, nonce in zip(socks, nonces, strict=True):  # every hello first, then the auths
            answer_challenge(sock, server.token, nonce)
        assert _wait(lambda: len(server.snapshot().ranks) == 300)
        assert server.refused == 0
    finally:
        for sock in socks:
            sock.close()
        server.close()


def test_the_listen_backlog_is_all_the_kernel_allows() -> None:
    """A check-in storm (16,000 ranks at once in bench control_scale) overflowed a backlog of
    1024; each overflow is a rank waiting out SYN retransmits. The kernel's own view of the
    listening socket (ss: Send-Q is the backlog) says what it got."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    server = ControlServer(ranks=8)
    try:
        port = server.address.rsplit(":", 1)[1]
        shown = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                               text=True, timeout=10, check=True).stdout.split()
        assert int(shown[2]) == min(LISTEN_BACKLOG, somaxconn)
    finally:
        server.close()


def test_a_rank_waiting_for_its_tensorflow_cluster_is_marked_until_it_joins() -> None:
    server = ControlServer()
    try:
        sock = _connect(server)
        seal = check_in(sock, server.token, rank=0, host="h", pid=42)
        sock.sendall(seal.seal("tf_forming", rank=0))
        assert _wait(lambda: [r.forming_since is not None for r in server.snapshot().ranks]
                     == [True])
        sock.sendall(seal.seal("tf_formed", rank=0))
        assert _wait(lambda: [r.forming_since for r in server.snapshot().ranks] == [None])
    finally:
        server.close()


def test_a_bad_field_is_dropped_and_logged_never_a_dead_thread() -> None:
    """Issue 23: '"pid":"12ab"' killed the server's thread; '"loss":"x"' crashed the
    launcher's loop. A hello with a bad field is refused, a progress field of the wrong type
    is left out, and the server goes on hearing the real ranks."""
    server = ControlServer()
    try:
        forged = _connect(server)
        say_hello(forged, rank=1, host="h", pid="12ab")
        assert _closed_by_peer(forged, 5)
        nested = _connect(server)
        say_hello(nested, rank=True, host=["x"], pid=7)
        assert _closed_by_peer(nested, 5)
        good = _connect(server)
        seal = check_in(good, server.token, rank=0, host="h", pid=42)
        good.sendall(seal.seal("progress", epoch="2", step=7, loss="x",
                               samples_per_s=float("nan")))
        assert _wait(lambda: server.snapshot().progress is not None)
        progress = server.snapshot().progress
        assert progress is not None
        assert (progress.epoch, progress.step, progress.loss, progress.samples_per_s) == (
            None, 7, None, None)
        good.sendall(seal.seal("progress", epoch=3, loss=0.25))
        assert _wait(lambda: (server.snapshot().progress or progress).epoch == 3)
        assert [r.rank for r in server.snapshot().ranks] == [0]
        assert server._thread.is_alive()
    finally:
        server.close()


def test_a_process_under_a_number_already_seen_gets_its_own() -> None:
    """--elastic: Horovod numbers its ranks again after a reset, so a process that joins can
    be given the number of one still running; each process keeps its own identity, and the
    same process reconnecting keeps its number."""
    server = ControlServer(ranks=2, elastic_world=2)
    try:
        first = _connect(server)
        check_in(first, server.token, rank=1, host="gpu01", pid=42)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [1])
        joiner = _connect(server)
        check_in(joiner, server.token, rank=1, host="gpu03", pid=7)
        assert _wait(lambda: len(server.snapshot().ranks) == 2)
        ranks = {r.rank: (r.host, r.pid) for r in server.snapshot().ranks}
        assert ranks == {1: ("gpu01", 42), 2: ("gpu03", 7)}
        first.close()
        assert _wait(lambda: not server.snapshot().ranks[0].connected)
        again = _connect(server)
        check_in(again, server.token, rank=1, host="gpu01", pid=42)
        assert _wait(lambda: all(r.connected for r in server.snapshot().ranks))
        assert len(server.snapshot().ranks) == 2
    finally:
        server.close()


def test_a_rank_outside_the_allocation_is_refused_with_the_peers_address(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 40 item 4: a token holder's hello as rank 999 was taken, and its silence reported
    as a lost host. Now a rank the job has no place for gets no challenge (under --elastic the
    bound is --max-np: ``elastic_world``)."""
    server = ControlServer(ranks=2, elastic_world=4)
    try:
        with caplog.at_level(logging.WARNING, logger="ringtrain.launch.control.server"):
            far = _connect(server)
            say_hello(far, rank=999, host="h", pid=42)
            assert _closed_by_peer(far, 5)  # no challenge
            edge = _connect(server)
            say_hello(edge, rank=4, host="h", pid=43)
            assert _closed_by_peer(edge, 5)
        inside = _connect(server)  # up to --max-np - 1 is a place: Horovod may grow to it
        check_in(inside, server.token, rank=3, host="h", pid=44)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [3])
        port = far.getsockname()[1]
        assert f"refused a connection from 127.0.0.1:{port}: rank 999" in caplog.text
        assert "outside this job's ranks 0-3" in caplog.text
    finally:
        server.close()


def test_a_rank_claimed_first_by_another_process_keeps_its_number(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 40 item 4: a ``done`` sent as rank 1 before the real rank 1 checked in was kept,
    and the real one renumbered (to 1000, after a claim for 999). Now, without --elastic, a
    rank's number is its process's for the attempt: the second process to claim it is refused
    and logged with its address; nothing is renumbered."""
    server = ControlServer(ranks=2)
    try:
        first = _connect(server)
        seal = check_in(first, server.token, rank=1, host="gpu01", pid=42)
        first.sendall(seal.seal("done"))
        assert _wait(lambda: [(r.rank, r.done) for r in server.snapshot().ranks] == [(1, True)])
        with caplog.at_level(logging.WARNING, logger="ringtrain.launch.control.server"):
            other = _connect(server)
            check_in(other, server.token, rank=1, host="gpu02", pid=7)
            assert _closed_by_peer(other, 5)
            first.close()  # gone: its number is still not another process's
            assert _wait(lambda: not server.snapshot().ranks[0].connected)
            late = _connect(server)
            check_in(late, server.token, rank=1, host="gpu02", pid=7)
            assert _closed_by_peer(late, 5)
        assert [(r.rank, r.host, r.pid) for r in server.snapshot().ranks] == [(1, "gpu01", 42)]
        port = other.getsockname()[1]
        assert (f"refused a connection from 127.0.0.1:{port}: rank 1 claimed by pid 7 on "
                "'gpu02', but pid 42 on 'gpu01' checked in as rank 1 first") in caplog.text
        again = _connect(server)  # the first process itself may come back
        check_in(again, server.token, rank=1, host="gpu01", pid=42)
        assert _wait(lambda: server.snapshot().ranks[0].connected)
    finally:
        server.close()


def test_elastic_stages_are_kept_as_numbers_only_and_bounded() -> None:
    from ringtrain.launch.control.server import ELASTIC_KEPT

    server = ControlServer()
    try:
        rank = _connect(server)
        seal = check_in(rank, server.token, rank=0, host="gpu01", pid=42)
        rank.sendall(seal.seal("elastic_reset"))
        rank.sendall(seal.seal("elastic_restored", source=1, epoch=3, step=10, size=2,
                               nbytes=220_000))
        rank.sendall(seal.seal("elastic_restored", source="x", epoch=-1, step=True, size=2.5))
        assert _wait(lambda: len(server.snapshot().restores) == 2)
        snap = server.snapshot()
        assert len(snap.resets) == 1
        first, forged = snap.restores
        assert (first.source, first.epoch, first.step, first.size, first.nbytes) == (
            1, 3, 10, 2, 220_000)
        assert (forged.source, forged.epoch, forged.step, forged.size, forged.nbytes) == (
            None, None, None, None, None)
        for _ in range(ELASTIC_KEPT + 5):
            rank.sendall(seal.seal("elastic_reset"))
        assert _wait(lambda: len(server.snapshot().resets) == ELASTIC_KEPT)
    finally:
        server.close()


def test_the_launcher_proves_the_token_first_and_each_proof_fits_one_connection() -> None:
    """Issue 23: a rank heard whatever sat at the launcher's address, and gave it the token in
    its hello. Now the server's first line proves the token for the rank's own nonce, the
    rank answers for the server's, and neither proof is of use on another connection."""
    server = ControlServer()
    try:
        sock = _connect(server)
        nonce = say_hello(sock, rank=0, host="h", pid=42)
        line = read_line(sock)
        challenge = decode(line)
        assert challenge is not None and challenge["t"] == "challenge"
        who = identity({"rank": 0, "host": "h", "pid": 42})
        assert challenge["proof"] == launcher_proof(server.token, nonce, challenge["nonce"], who)
        assert server.token.encode() not in line
        time.sleep(0.2)
        assert server.snapshot().ranks == ()  # not a rank before its auth
        auth = encode("auth", proof=rank_proof(server.token, nonce, challenge["nonce"], who))
        sock.sendall(auth)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [0])
        replay = _connect(server)  # what was seen on the wire, said again
        replay.sendall(encode("hello", nonce=nonce, rank=1, host="h", pid=43, proto=PROTOCOL))
        again = decode(read_line(replay))
        assert again is not None and again["nonce"] != challenge["nonce"]
        replay.sendall(auth)
        assert _closed_by_peer(replay, 5)
        assert [r.rank for r in server.snapshot().ranks] == [0]
    finally:
        server.close()


def test_a_hello_relabelled_on_its_way_is_refused_at_the_auth(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 40 item 4: a relay without the token changed the hello's rank and PID and passed
    the rank's auth on; the launcher took the rank as the one the relay named. Now the rank's
    proof covers what it said itself: the launcher refuses it for the relabelled hello."""
    server = ControlServer()
    try:
        sock = _connect(server)
        said = {"rank": 0, "host": "gpu01", "pid": 42, "start": 7}
        relabelled = {**said, "rank": 1, "pid": 4242}
        nonce = "d" * 32
        sock.sendall(encode("hello", nonce=nonce, proto=PROTOCOL, **relabelled))
        theirs = json.loads(read_line(sock))["nonce"]
        with caplog.at_level(logging.WARNING, logger="ringtrain.launch.control.server"):
            sock.sendall(encode("auth", proof=rank_proof(server.token, nonce, theirs,
                                                         identity(said))))
            assert _closed_by_peer(sock, 5)
        assert server.snapshot().ranks == ()
        assert "without the job's token (its hello said rank 1" in caplog.text
    finally:
        server.close()


def test_a_second_connection_for_a_connected_rank_is_refused_not_a_takeover(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 23: a second hello for the same rank and process took the rank over, and when
    the first connection closed the rank read as disconnected while the second spoke for it.
    Now the first connection keeps the rank and the second is refused and logged."""
    server = ControlServer()
    try:
        first = _connect(server)
        seal = check_in(first, server.token, rank=0, host="h", pid=42)
        assert _wait(lambda: [r.rank for r in server.snapshot().ranks] == [0])
        with caplog.at_level(logging.WARNING, logger="ringtrain.launch.control.server"):
            second = _connect(server)
            check_in(second, server.token, rank=0, host="h", pid=42)
            assert _closed_by_peer(second, 5)
        assert "a second connection for rank 0" in caplog.text
        first.sendall(seal.seal("done"))
        assert _wait(lambda: server.snapshot().ranks[0].done)
        assert [(r.rank, r.connected) for r in server.snapshot().ranks] == [(0, True)]
        assert server.refused == 1
    finally:
        server.close()


def test_a_connection_speaks_for_its_own_hellos_rank_only() -> None:
    """What a message's own ``rank`` field says, or a second hello on the same connection,
    changes nothing: the connection speaks for the rank it checked in as (this held before
    issue 23's change too; kept by this test)."""
    server = ControlServer()
    try:
        zero, one = _connect(server), _connect(server)
        seal = check_in(zero, server.token, rank=0, host="h", pid=42)
        check_in(one, server.token, rank=1, host="h", pid=43)
        assert _wait(lambda: len(server.snapshot().ranks) == 2)
        zero.sendall(seal.seal("hello", nonce="b" * 32, rank=1, host="h", pid=43))
        zero.sendall(seal.seal("done", rank=1) + seal.seal("init", rank=1, size=2))
        assert _wait(lambda: server.snapshot().ranks[0].done)
        one_state = server.snapshot().ranks[1]
        assert not one_state.done and not one_state.initialized and one_state.pid == 43
        assert [r.pid for r in server.snapshot().ranks] == [42, 43]
    finally:
        server.close()


def test_a_message_outside_the_protocol_is_dropped_the_rank_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 23: a deeply nested line raised RecursionError in the server's reader, and the
    rank was dropped as if it had sent a bad message on purpose (with a traceback). Now such a
    message, an unknown kind, or a handshake message after the handshake is dropped and
    logged once; the rank stays heard."""
    server = ControlServer()
    try:
        sock = _connect(server)
        seal = check_in(sock, server.token, rank=0, host="h", pid=42)
        assert _wait(lambda: len(server.snapshot().ranks) == 1)
        with caplog.at_level(logging.WARNING, logger="ringtrain.launch.control.server"):
            deep = b'{"t":"hb","seq":9,"x":' + b"[" * 5000 + b"}"
            sock.sendall(deep + b"\t" + seal._mac(deep) + b"\n" + seal.seal("bogus")
                         + seal.seal("auth", proof="x") + b"not json\n")
            sock.sendall(seal.seal("progress", epoch=1, step=9))
            assert _wait(lambda: server.snapshot().progress is not None)
        assert caplog.text.count("not in the protocol") == 1
        assert "Traceback" not in caplog.text
        assert server.snapshot().ranks[0].connected and server._thread.is_alive()
    finally:
        server.close()


def test_after_the_handshake_only_messages_sealed_for_the_connection_are_heard() -> None:
    """Whoever can rewrite the traffic between the hosts (not the token's holder): a plain
    message, one altered, one replayed, and one sealed for another rank's connection are all
    dropped; the connection's own sealed messages are heard, once each."""
    server = ControlServer()
    try:
        zero, one = _connect(server), _connect(server)
        seal0 = check_in(zero, server.token, rank=0, host="h", pid=42)
        seal1 = check_in(one, server.token, rank=1, host="h", pid=43)
        assert _wait(lambda: len(server.snapshot().ranks) == 2)
        reset = seal0.seal("elastic_reset")
        altered = seal0.seal("progress", epoch=1, step=5).replace(b'"step":5', b'"step":6')
        zero.sendall(encode("done") + altered + seal1.seal("init", size=2) + reset + reset)
        zero.sendall(seal0.seal("progress", epoch=1, step=7))
        assert _wait(lambda: (server.snapshot().progress or Progress()).step == 7)
        snap = server.snapshot()
        assert not snap.ranks[0].done and not snap.ranks[0].initialized
        assert len(snap.resets) == 1  # the replayed reset was not taken again
        assert [r.connected for r in snap.ranks] == [True, True]
    finally:
        server.close()


def test_every_kind_the_rank_side_sends_is_one_the_server_hears() -> None:
    """The server drops a kind outside RANK_EVENTS: each kind that ringtrain's code sends to
    the launcher (``send("...")``, memory's ``_tell("...")``) and every kind the relay
    forwards must be listed, or it would be dropped as a forgery."""
    root = Path(ringtrain.__file__).parent
    hub = root / "rank" / "hub.py"  # a host's hub speaks its own kinds (hubs.HUB_KINDS)
    pattern = r'\b(?:send|_tell|tell)\(\s*"([a-z_]+)"'
    sent = {kind for path in root.rglob("*.py") if path != hub
            for kind in re.findall(pattern, path.read_text())}
    assert {"hb", "progress", "done", "elastic_reset"} <= sent  # the scan sees them
    assert sent <= RANK_EVENTS
    assert set(FORWARDED) <= RANK_EVENTS
    told = set(re.findall(pattern, hub.read_text()))
    assert {"join", "ev", "beat", "left"} <= told <= hubs.HUB_KINDS


def test_step_times_that_are_not_finite_are_left_out() -> None:
    """Issue 23: '"compute": Infinity' (JSON that Python reads) was kept, and a window mean of
    inf or NaN went into straggler scores and result.json."""
    server = ControlServer()
    try:
        sock = _connect(server)
        seal = check_in(sock, server.token, rank=0, host="h", pid=42)
        sock.sendall(seal.seal("steps", n=3, compute=float("inf"), wall=float("inf")))
        assert _wait(lambda: server.snapshot().ranks
                     and server.snapshot().ranks[0].steps is not None)
        steps = server.snapshot().ranks[0].steps
        assert steps is not None
        assert (steps.compute, steps.wall, steps.total_steps) == (None, None, 0)
    finally:
        server.close()


def test_a_flood_from_one_address_cannot_keep_the_ranks_out() -> None:
    """Issue 40: idle connections from one address, reopened as fast as the server closes
    them, while a job's ranks (real agents, from another address) check in. The flood holds
    at most ``max_per_source`` places, each for ``IDLE_S`` at most: every rank is heard.
    (Before: 64 idle connections filled ``max_pending`` and every rank was refused.)"""
    from ringtrain.rank.agent import RankAgent

    server = ControlServer(ranks=10, per_host=10)
    host, port = server.address.rsplit(":", 1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def open_(sock: socket.socket) -> bool:
        try:
            return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def flood() -> None:  # from 127.0.0.2: loopback answers for all of 127/8
        while not stop.is_set():
            for sock in [s for s in held if not open_(s)]:
                held.remove(sock)
                sock.close()
            while len(held) < 3 * MAX_PENDING and not stop.is_set():
                sock = socket.socket()
                sock.bind(("127.0.0.2", 0))
                try:
                    sock.connect((host, int(port)))
                except OSError:
                    sock.close()
                    break
                held.append(sock)
            time.sleep(0.01)

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    try:
        assert _wait(lambda: server.refused > MAX_PENDING)  # the flood is on: refused at once
        agents = [RankAgent(server.address, server.token, rank=r, launcher_timeout=60)
                  for r in range(10)]
        for agent in agents:
            agent._die = lambda why: None  # type: ignore[method-assign]
        starts = [threading.Thread(target=a.start, daemon=True) for a in agents]
        for thread in starts:
            thread.start()
        assert _wait(lambda: len(server.snapshot().ranks) == 10, timeout=20), (
            [r.rank for r in server.snapshot().ranks])
        assert flooder.is_alive()  # it flooded all along
        assert len(server._pending) <= server.max_per_source
    finally:
        stop.set()
        flooder.join(timeout=5)
        for sock in held:
            sock.close()
        server.close()


@pytest.mark.parametrize("proto", [None, 0, PROTOCOL + 1, "1"])
def test_a_rank_of_another_ringtrain_release_is_refused_by_name_with_the_fix(
        proto: object, caplog: pytest.LogCaptureFixture) -> None:
    server = ControlServer()
    try:
        sock = _connect(server)
        fields: dict[str, object] = {"rank": 0, "host": "gpu07", "pid": 42}
        if proto is not None:  # none: a release from before the protocol had a number
            fields["proto"] = proto
        sock.sendall(encode("hello", nonce="c" * 32, **fields))
        assert _closed_by_peer(sock, 5)  # no challenge
        assert server.snapshot().ranks == ()
    finally:
        server.close()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "rank 0 on gpu07 speaks ringtrain control protocol" in said
    assert f"install ringtrain {ringtrain.__version__}" in said


def _rank(rank: int, *, ring: int, ring_at: float, begun_at: float = 0.0,
          last_heard: float = 100.0, started: float | None = None) -> RankState:
    return RankState(rank=rank, host="gpu01", pid=1000 + rank, ring=ring, ring_at=ring_at,
                     begun_at=begun_at, last_heard=last_heard, started=started)


@pytest.mark.parametrize(("survivor", "gone", "want"), [
    # the ring it formed had the lost rank (formed before the lost rank's last word)
    (_rank(1, ring=2, ring_at=10.0), _rank(0, ring=2, ring_at=10.0), 2),
    # a ring formed after the lost rank's last word is without it
    (_rank(1, ring=3, ring_at=120.0), _rank(0, ring=2, ring_at=10.0), None),
    # no ring formed yet, nothing forming
    (_rank(1, ring=0, ring_at=0.0), _rank(0, ring=2, ring_at=10.0), None),
    # both were forming the next ring (a fault during the re-form): abort the forming one
    (_rank(1, ring=2, ring_at=10.0, begun_at=50.0), _rank(0, ring=2, ring_at=10.0,
                                                          begun_at=50.5), 3),
    # a new process (refilled slot) lost while forming its first ring
    (_rank(1, ring=2, ring_at=10.0, begun_at=50.0), _rank(3, ring=0, ring_at=0.0,
                                                          begun_at=49.0), 3),
    # the lost rank died in the old ring; the survivor forms a round without it: left alone
    (_rank(1, ring=2, ring_at=10.0, begun_at=50.0), _rank(0, ring=2, ring_at=10.0), None),
    # the launcher never knew the lost rank: the formed ring, never a forming one
    (_rank(1, ring=2, ring_at=10.0), None, 2),
    (_rank(1, ring=2, ring_at=10.0, begun_at=50.0), None, None),
])
def test_the_ring_a_survivor_aborts(survivor: RankState, gone: RankState | None,
                                    want: int | None) -> None:
    assert ring_to_abort(survivor, gone) == want


def test_a_process_joining_a_doomed_round_is_told_once_and_a_formed_ring_ends_it() -> None:
    """Rank 3 was lost (at t=1000) while the round formed; ranks 1 and 2 were told then. A
    process that started before the loss (filling slot 0 for an earlier one) begins its init
    later: told, once. The lost rank's replacement (started after the loss) joins the next
    round: not told; nor a process that did not say when it started, nor rank 1 beginning
    again after its failed init."""
    doomed = DoomedRound(lost=3, at=1000.0, told={("gpu01", 1001), ("gpu01", 1002)})
    newcomer = _rank(0, ring=0, ring_at=0.0, begun_at=60.0, started=999.5)
    assert doomed.joined(newcomer) == 1
    assert doomed.joined(newcomer) is None
    assert doomed.joined(_rank(4, ring=0, ring_at=0.0, begun_at=61.0, started=1000.8)) is None
    assert doomed.joined(_rank(5, ring=0, ring_at=0.0, begun_at=61.0)) is None
    assert doomed.joined(_rank(1, ring=2, ring_at=10.0, begun_at=61.0, started=900.0)) is None
    assert doomed.joined(_rank(6, ring=3, ring_at=62.0, begun_at=61.0, started=900.0)) is None
    assert joined(doomed, newcomer, "init") == (None, None)  # a ring formed: it ends
    elsewhere = replace(_rank(1, ring=2, ring_at=10.0, begun_at=61.0, started=900.0),
                        host="gpu02")  # another host's process with rank 1's pid
    assert doomed.joined(elsewhere) == 3


class _Peer:
    """A rank over a real control connection: its messages sealed, the launcher's opened."""

    def __init__(self, server: ControlServer, rank: int) -> None:
        host, port = server.address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.out, self.inn = answer_challenge(
            self.sock, server.token, say_hello(self.sock, rank=rank, host="h", pid=100 + rank))

    def send(self, kind: str, **fields: object) -> None:
        self.sock.sendall(self.out.seal(kind, **fields))

    def read(self, kind: str, timeout: float = 5.0) -> dict[str, object]:
        """The next message of ``kind`` (heartbeats skipped)."""
        self.sock.settimeout(timeout)
        while True:
            msg = self.inn.open(read_line(self.sock))
            assert msg is not None
            if msg["t"] == kind:
                return msg

    def nothing(self, seconds: float, kind: str = "abort") -> bool:
        self.sock.settimeout(seconds)
        try:
            while True:
                msg = self.inn.open(read_line(self.sock))
                if msg is None or msg["t"] == kind:
                    return False
        except TimeoutError:
            return True


def test_the_launcher_tells_a_late_joiner_of_a_doomed_round_over_the_wire() -> None:
    """Over real control connections: ranks 1 and 3 formed ring 1 and both begin the next;
    rank 3 is lost, rank 1 is told to abort the forming ring 2. A process that checks in as
    rank 0 afterwards and begins its init is told too (its ring 1); after a ring forms, its
    next beginning is told nothing."""
    server = ControlServer(ranks=4, elastic_world=4)
    peers: dict[int, _Peer] = {}
    try:
        for rank in (1, 3):
            peers[rank] = _Peer(server, rank)
            peers[rank].send("init", size=4, local_rank=rank, hvd_rank=rank, ring=1)
        time.sleep(0.05)
        for rank in (1, 3):
            peers[rank].send("init_begin")
        assert _wait(lambda: sum(r.forming_ring for r in server.snapshot().ranks) == 2)
        assert server.abort_ring(3) == 1
        told = peers[1].read("abort")
        assert (told["ring"], told["lost"]) == (2, 3)
        peers[3].sock.close()  # the lost rank's connection closes (it died)
        peers[0] = _Peer(server, 0)  # started before the loss, begins its init after it
        peers[0].send("init_begin", started=time.time() - 30)
        told = peers[0].read("abort")
        assert (told["ring"], told["lost"]) == (1, 3)
        peers[2] = _Peer(server, 2)  # the lost rank's replacement: started after the loss
        peers[2].send("init_begin", started=time.time())
        assert peers[2].nothing(0.5)
        peers[1].send("init", size=3, local_rank=1, hvd_rank=1, ring=2)
        time.sleep(0.05)
        peers[0].send("init_begin", started=time.time() - 30)
        assert peers[0].nothing(0.5)
    finally:
        for peer in peers.values():
            peer.sock.close()
        server.close()
