"""The launcher side of the control protocol (see events.py): a small TCP server.

It accepts one connection per rank, checks the token, keeps each rank's latest state, and sends
a heartbeat to every rank each second. One thread reads every connection through a selector
(a thread per connection cost 185% CPU and 229 ms supervision ticks at 8,000 simulated ranks,
and a false "host silent": bench/launcher/control_scale.py). ``snapshot()`` returns an
immutable view that the pure supervision checks in supervise.py read.

Anyone who can reach the port can connect, so nothing is trusted before the token: a peer
must finish the handshake (``hello``, ``challenge``, ``auth`` proving the token: events.py)
within ``HELLO_TIMEOUT_S``, and say something within ``admission.IDLE_S``; at most
``max_pending`` connections may be waiting to do so, ``max_per_source`` from one address (more
are closed at once: admission.py); every read is bounded by ``MAX_LINE`` (a longer line drops
the connection), so memory stays flat under a flood and there are two threads whatever the
number of connections. ``max_pending`` is ``MAX_PENDING`` or the job's rank count, whichever is
larger: all ranks of a large job may check in at once (bench/launcher/control_scale.py: with a
fixed 64, 116 of 8,000 simulated ranks were closed unheard and would have been reported as
never started); ``max_per_source`` is above the ranks of the busiest host (``per_host``), so
one peer flooding the port cannot keep a rank out: the rank's agent connects again when its
connection is closed before the handshake's end (rank/agent.py). A connection speaks for its
own hello's rank only; a second one for a rank (host and PID) still connected is refused,
never let take over; nor one for a rank outside the job (``world``), nor a process claiming a
number another checked in with first (``hello.claim``). Each refusal is logged with the peer.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ringtrain.launch.control.admission import IDLE_S, PER_SOURCE, Admission
from ringtrain.launch.control.hello import Hello, authentic, challenge, claim, outside, read_hello
from ringtrain.launch.control.listener import Listener, make_room
from ringtrain.launch.control.rounds import DoomedRound, joined, ring_of, ring_to_abort
from ringtrain.launch.record.snapshot import Progress, RankState, Restored, Snapshot
from ringtrain.launch.record.steptimes import StepTimes
from ringtrain.rank.events import (
    HEARTBEAT_S,
    MAX_LINE,
    RANK_EVENTS,
    RankEvent,
    Seal,
    count,
    decode,
    number,
    session_key,
    to_event,
)

__all__ = ["ControlServer", "Progress", "RankState", "Restored", "Snapshot"]

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 10.0
MAX_PENDING = 64


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    opened: float = 0.0
    peer: str = "?"  # the address it connected from (for the log)
    rank: int | None = None  # set once the handshake is done: the rank it speaks for
    hello: Hello | None = None  # what it said in its hello, before its auth
    nonce: str = ""  # the launcher's nonce in this connection's challenge
    noted: bool = False  # a message dropped and logged (once per connection)
    inn: Seal | None = None  # after the handshake: the rank's sealed messages, opened
    out: Seal | None = None  # ... and the launcher's, sealed
    buffer: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ControlServer:
    def __init__(
        self,
        bind: str = "127.0.0.1",
        on_event: Callable[[RankEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        hello_timeout: float = HELLO_TIMEOUT_S,
        ranks: int = 0,
        per_host: int | None = None,
        elastic_world: int | None = None,  # --elastic: the most ranks (--max-np)
    ) -> None:
        self.hello_timeout = hello_timeout
        # a hello may name ranks 0 .. world-1 (0: not known, any)
        self.world, self.elastic = elastic_world or ranks, elastic_world is not None
        make_room(self.world)  # a descriptor a rank (listener.py)
        self.max_pending = max(MAX_PENDING, ranks + 8)
        # the most ranks one host runs (None: all of them may be on one)
        self.max_per_source = max(PER_SOURCE, (ranks if per_host is None else per_host) + 8)
        self.token = secrets.token_hex(16)
        self._clock = clock
        self._on_event = on_event
        self._ranks: dict[int, RankState] = {}
        self._progress: Progress | None = None
        self._resets: list[float] = []  # bounded (ELASTIC_KEPT): a peer cannot grow them
        self._restores: list[Restored] = []
        self.preempt_commit: tuple[int | None, int | None] | None = None  # (epoch, step)
        self._doomed: DoomedRound | None = None  # a rank lost while the ring formed (rounds.py)
        self._conns: set[_Conn] = set()
        # connections before their handshake's end: bounded in all, per address, in time
        self._pending: Admission[_Conn] = Admission(
            self.max_pending, self.max_per_source, IDLE_S, hello_timeout)
        self.refused = 0  # closed unheard: over max_pending, silent, no token, a rank's 2nd
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._listener = Listener(bind, self._selector)
        self.address = self._listener.address
        self._thread = threading.Thread(target=self._loop, name="control-loop", daemon=True)
        self._thread.start()
        threading.Thread(target=self._beat, name="control-beat", daemon=True).start()

    @property
    def port(self) -> int:
        return self._listener.port

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                tuple(sorted(self._ranks.values(), key=lambda r: r.rank)),
                self._progress,
                self._clock(),
                tuple(self._resets),
                tuple(self._restores),
            )

    def commits_checkpoints(self) -> bool:
        """Whether a rank said it commits checkpoints (``ringtrain.keras``)."""
        with self._lock:
            return any("checkpoint" in r.api for r in self._ranks.values())

    def close(self) -> None:
        """Stop; every connection is closed when this returns (the loop closes them)."""
        self._closed.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)

    # ------------------------------------------------------------------ the loop
    # One thread reads every connection through a selector: at 8,000 ranks a thread per
    # connection spent the launcher's CPU on switching between them
    # (bench/launcher/control_scale.py).

    def _loop(self) -> None:
        try:
            while not self._closed.is_set():
                for key, _ in self._selector.select(timeout=0.25):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                self._expire_pending()
                self._listener.wake()
        finally:
            self._shut()

    def _shut(self) -> None:
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._drop(conn)
        self._selector.close()

    def _accept(self) -> None:
        for sock, peer in self._listener.accept():
            conn = _Conn(sock, opened=time.monotonic(), peer=_address(peer))
            if not self._pending.admit(conn, str(peer[0]), conn.opened):
                self.refused += 1  # no place (in all, or for its address): closed at once
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            sock.setblocking(False)
            with self._lock:
                self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _expire_pending(self) -> None:
        """A peer must speak within ``IDLE_S`` and prove the token within ``hello_timeout``."""
        if len(self._pending):
            for conn in self._pending.expired(time.monotonic()):
                self._drop(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buffer += data
        if conn.rank is None:
            self._pending.heard(conn)
        while True:
            end = conn.buffer.find(b"\n")
            if end < 0:
                if len(conn.buffer) > MAX_LINE:
                    self._drop(conn)  # a line over the limit: drop the peer
                return
            line = bytes(conn.buffer[: end + 1])
            del conn.buffer[: end + 1]
            if len(line) > MAX_LINE + 1:
                self._drop(conn)
                return
            try:
                keep = self._line(conn, line)
            except Exception:  # a message nobody foresaw: that peer goes, supervision stays
                log.exception("control: dropped rank %s after a message it could not "
                              "handle", conn.rank)
                keep = False
            if not keep:
                self._drop(conn)
                return

    def _line(self, conn: _Conn, line: bytes) -> bool:
        """Handle one line; False: drop the peer."""
        if conn.rank is None:  # the handshake: hello, then auth, nothing else in between
            msg = decode(line)
            if msg is None:
                return False
            return self._hello(conn, msg) if conn.hello is None else self._auth(conn, msg)
        assert conn.inn is not None
        msg = conn.inn.open(line)
        if msg is None or msg["t"] not in RANK_EVENTS:
            if not conn.noted:  # once per connection: a peer cannot flood the log
                conn.noted = True
                log.warning("control: rank %s sent a message not sealed for this connection "
                            "or not in the protocol (%r); dropped it (and any more)",
                            conn.rank, line[:60])
            return True
        self._handle(conn, msg)
        return True

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        if self._pending.leave(conn):
            self.refused += 1
        with self._lock:
            self._conns.discard(conn)
            if conn.rank is not None and conn.rank in self._ranks:
                self._ranks[conn.rank] = replace(self._ranks[conn.rank], connected=False,
                                                 gone_at=self._clock())
        with conn.lock, contextlib.suppress(OSError):
            conn.sock.close()

    def _hello(self, conn: _Conn, msg: dict[str, Any]) -> bool:
        """Answer a hello with the challenge (the launcher's proof, its own nonce)."""
        hello = read_hello(msg)
        if isinstance(hello, str):
            log.warning("control: dropped a connection from %s: %s", conn.peer, hello)
            return False
        why = outside(hello, self.world)
        if why is not None:
            log.warning("control: refused a connection from %s: %s", conn.peer, why)
            return False
        conn.hello, conn.nonce = hello, secrets.token_hex(16)
        data = challenge(self.token, hello, conn.nonce)
        with conn.lock, contextlib.suppress(OSError):  # a new connection: its buffer is empty
            return conn.sock.send(data, socket.MSG_DONTWAIT) == len(data)
        return False

    def _auth(self, conn: _Conn, msg: dict[str, Any]) -> bool:
        """The rank proved the token: from now on the connection speaks for its hello's rank."""
        hello = conn.hello
        assert hello is not None
        if not authentic(self.token, hello, conn.nonce, msg):
            log.warning("control: dropped a connection from %s without the job's token (its "
                        "hello said rank %d on %r)", conn.peer, hello.rank, hello.host[:64])
            return False
        with self._lock:
            rank = claim(hello, self._ranks.get(hello.rank), self.elastic,
                         max(self._ranks, default=-1) + 1)
            if isinstance(rank, str):
                log.warning("control: refused a connection from %s: %s", conn.peer, rank)
                return False
            conn.rank = rank
            key = session_key(self.token, hello.nonce, conn.nonce)
            conn.inn, conn.out = Seal(key, "rank"), Seal(key, "launcher")
            self._ranks[rank] = RankState(
                rank=rank, host=hello.host, pid=hello.pid, start=hello.start, ppid=hello.ppid,
                parent=hello.parent, parent_start=hello.parent_start, last_heard=self._clock())
        self._pending.leave(conn)
        return True

    def _handle(self, conn: _Conn, msg: dict[str, Any]) -> None:
        assert conn.rank is not None
        now = self._clock()
        kind = msg["t"]
        with self._lock:
            state = self._ranks.get(conn.rank)
            if state is not None:
                state = replace(
                    state,
                    last_heard=now,
                    init_begun=state.init_begun or kind in ("init_begin", "init"),
                    initialized=state.initialized or kind == "init",
                    ring=ring_of(msg, state.ring) if kind == "init" else state.ring,
                    ring_at=now if kind == "init" else state.ring_at,
                    begun_at=now if kind == "init_begin" else state.begun_at,
                    started=number(msg.get("started")) if kind == "init_begin" else state.started,
                    forming_since=(now if kind == "tf_forming" else None
                                   if kind == "tf_formed" else state.forming_since),
                    done_at=now if kind == "done" and state.done_at is None else state.done_at,
                    api=_api_parts(state.api, msg) if kind == "api" else state.api,
                    steps=(state.steps or _NO_STEPS).then(msg, now)
                    if kind == "steps" else state.steps,
                )
                self._ranks[conn.rank] = state
                self._doomed, ring = joined(self._doomed, state, kind)
                if ring is not None and self._doomed is not None:
                    self._send(conn, "abort", ring=ring, lost=self._doomed.lost)
            if kind == "progress":  # a field of the wrong type is left out, never trusted
                self._progress = Progress(
                    epoch=count(msg.get("epoch")),
                    epochs=count(msg.get("epochs")),
                    step=count(msg.get("step")),
                    steps=count(msg.get("steps")),
                    loss=number(msg.get("loss")),
                    samples_per_s=number(msg.get("samples_per_s")),
                    at=now,
                )
            elif kind == "elastic_reset":
                self._resets = [*self._resets, now][-ELASTIC_KEPT:]
            elif kind == "preempt_committed":  # numbers only: (epoch, step)
                self.preempt_commit = (count(msg.get("epoch")), count(msg.get("step")))
            elif kind == "elastic_restored":  # numbers only, as for progress
                self._restores = [*self._restores, Restored(
                    now, count(msg.get("source")), count(msg.get("epoch")),
                    count(msg.get("step")), count(msg.get("size")),
                    count(msg.get("nbytes")))][-ELASTIC_KEPT:]
        if self._on_event is not None and kind not in ("hb", "steps"):
            self._on_event(to_event(msg, conn.rank))

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            self.broadcast("hb")

    def broadcast(self, kind: str) -> None:
        with self._lock:
            conns = [c for c in self._conns if c.out is not None]
        for conn in conns:
            self._send(conn, kind)

    def abort_ring(self, lost: int) -> int:
        """Rank ``lost`` is gone (--elastic): each rank whose ring had it is told to shut it
        down now (rank/abort.py; which ring: rounds.py). Returns how many were told."""
        with self._lock:
            gone = self._ranks.get(lost)
            told = [(c, ring, (r.host, r.pid)) for c in self._conns
                    if c.out is not None and c.rank is not None and c.rank != lost
                    and (r := self._ranks.get(c.rank)) and (ring := ring_to_abort(r, gone))]
            if gone is not None and gone.forming_ring:  # at: its loss on the ranks' clocks
                at = time.time() - (self._clock() - (gone.gone_at or self._clock()))
                self._doomed = DoomedRound(lost, at, {who for _, _, who in told})
        for conn, ring, _ in told:
            self._send(conn, "abort", ring=ring, lost=lost)
        return len(told)

    @staticmethod
    def _send(conn: _Conn, kind: str, **fields: Any) -> None:
        # Never block on a rank whose host stopped reading (a cut link): drop the message.
        with conn.lock, contextlib.suppress(OSError):
            assert conn.out is not None
            conn.sock.send(conn.out.seal(kind, **fields), socket.MSG_DONTWAIT)


_NO_STEPS = StepTimes(None, None, 0.0)


def _address(peer: Any) -> str:
    return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"


ELASTIC_KEPT = 64


def _api_parts(known: tuple[str, ...], msg: dict[str, Any]) -> tuple[str, ...]:
    parts = [k for k in ("checkpoint", "progress", "resume") if msg.get(k)]
    return tuple(sorted(set(known) | set(parts)))
