"""The launcher side of the control protocol (see events.py): a small TCP server.

It accepts a connection per rank, or under ``--control-hubs`` one per host from that host's
hub speaking for its ranks (rank/hub.py, hubs.py), checks the token, keeps each rank's latest
state and sends every connection a heartbeat each second. One thread reads every connection
through a selector (a thread per connection: 185% CPU and 229 ms ticks at 8,000 simulated
ranks, and a false "host silent": bench/launcher/control_scale.py). ``snapshot()`` returns an
immutable view that the pure supervision checks (supervise/detect.py) read.

Anyone who can reach the port can connect, so nothing is trusted before the token: a peer
must finish the handshake (``hello``, ``challenge``, ``auth`` proving the token: events.py)
within ``HELLO_TIMEOUT_S`` and say something within ``admission.IDLE_S``; at most
``max_pending`` connections wait to do so (``MAX_PENDING`` or the job's ranks: all ranks of a
large job may check in at once; a fixed 64 closed 116 of 8,000 unheard), ``max_per_source``
from one address (above the busiest host's ranks, so one peer flooding the port cannot keep a
rank out; the agent tries again: rank/agent.py); every read is bounded by ``MAX_LINE``. A
connection speaks for its own hello's rank only (a hub: for the ranks that joined through it,
of its own host); a second one for a rank (host and PID) still connected is refused, never let
take over; nor one for a rank outside the job (``world``), nor a process claiming a number
another checked in with first (``hello.claim``). Each refusal is logged with the peer.
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
from typing import Any

from ringtrain.launch.control import hubs
from ringtrain.launch.control.admission import IDLE_S, PER_SOURCE, Admission
from ringtrain.launch.control.apply import ELASTIC_KEPT, progress_of, restored_of, updated
from ringtrain.launch.control.conn import Conn, address, send
from ringtrain.launch.control.hello import Hello, authentic, challenge, outside, read_hello
from ringtrain.launch.control.listener import Listener, make_room
from ringtrain.launch.control.registry import Registry
from ringtrain.launch.control.rounds import DoomedRound, joined, ring_to_abort
from ringtrain.launch.record.snapshot import Progress, RankState, Restored, Snapshot
from ringtrain.rank.events import (
    HEARTBEAT_S,
    HUB_ROLE,
    MAX_LINE,
    RANK_EVENTS,
    RankEvent,
    Seal,
    count,
    decode,
    session_key,
    to_event,
)

__all__ = ["ControlServer", "Progress", "RankState", "Restored", "Snapshot"]

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 10.0
MAX_PENDING = 64


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
        connections: int | None = None,  # the most the job opens (None: one a rank; hubs: a host)
    ) -> None:
        self.hello_timeout = hello_timeout
        # a hello may name ranks 0 .. world-1 (0: not known, any)
        self.world, self.elastic = elastic_world or ranks, elastic_world is not None
        # a descriptor a connection (listener.py); under hubs room for a rank each all the
        # same as far as the hard limit allows (a rank that finds no hub checks in directly)
        make_room(connections or self.world, self.world)
        self.max_pending = max(MAX_PENDING, ranks + 8)
        # the most ranks one host runs (None: all of them may be on one)
        self.max_per_source = max(PER_SOURCE, (ranks if per_host is None else per_host) + 8)
        self.token = secrets.token_hex(16)
        self._clock = clock
        self._on_event = on_event
        self._ranks: Registry[Conn] = Registry(self.elastic)  # who checked in, and how
        self._progress: Progress | None = None
        self._resets: list[float] = []  # bounded (ELASTIC_KEPT): a peer cannot grow them
        self._restores: list[Restored] = []
        self.preempt_commit: tuple[int | None, int | None] | None = None  # (epoch, step)
        self._doomed: DoomedRound | None = None  # a rank lost while the ring formed (rounds.py)
        self._conns: set[Conn] = set()
        # connections before their handshake's end: bounded in all, per address, in time
        self._pending: Admission[Conn] = Admission(
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
                self._ranks.in_order(),
                self._progress,
                self._clock(),
                tuple(self._resets),
                tuple(self._restores),
            )

    def commits_checkpoints(self) -> bool:
        """Whether a rank said it commits checkpoints (``ringtrain.keras``)."""
        with self._lock:
            return any("checkpoint" in r.api for r in self._ranks.states.values())

    def close(self) -> None:
        """Stop; every connection is closed when this returns (the loop closes them)."""
        self._closed.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)

    # ------------------------------------------------------------------ the loop

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
            conn = Conn(sock, opened=time.monotonic(), peer=address(peer))
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

    def _read(self, conn: Conn) -> None:
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
        if conn.inn is None:
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
                if not conn.noted:  # once per connection (a hub is kept: its one message)
                    log.exception("control: %s: a message it could not handle",
                                  conn.describe())
                conn.noted = True
                keep = conn.hub is not None
            if not keep:
                self._drop(conn)
                return

    def _line(self, conn: Conn, line: bytes) -> bool:
        """Handle one line; False: drop the peer."""
        if conn.inn is None:  # the handshake: hello, then auth, nothing else in between
            msg = decode(line)
            if msg is None:
                return False
            return self._hello(conn, msg) if conn.hello is None else self._auth(conn, msg)
        msg = conn.inn.open(line)
        kinds = RANK_EVENTS if conn.hub is None else hubs.HUB_KINDS
        if msg is None or msg["t"] not in kinds:
            if not conn.noted:  # once per connection: a peer cannot flood the log
                conn.noted = True
                log.warning("control: %s sent a message not sealed for this connection "
                            "or not in the protocol (%r); dropped it (and any more)",
                            conn.describe(), line[:60])
            return True
        if conn.hub is not None:
            self._from_hub(conn, conn.hub, msg)
        elif conn.rank is not None:
            self._handle(conn.rank, msg)
        return True

    def _drop(self, conn: Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        if self._pending.leave(conn):
            self.refused += 1
        with self._lock:
            self._conns.discard(conn)
            ranks = [conn.rank] if conn.hub is None else list(conn.hub.slots.values())
            for rank in ranks:
                self._ranks.gone(rank, conn, self._clock())
        with conn.lock, contextlib.suppress(OSError):
            conn.sock.close()

    def _hello(self, conn: Conn, msg: dict[str, Any]) -> bool:
        """Answer a hello with the challenge (the launcher's proof, its own nonce)."""
        hub = hubs.is_hub(msg)
        hello = hubs.read_hub_hello(msg) if hub else read_hello(msg)
        if isinstance(hello, str):
            log.warning("control: dropped a connection from %s: %s", conn.peer, hello)
            return False
        why = None if hub else outside(hello, self.world)
        if why is not None:
            log.warning("control: refused a connection from %s: %s", conn.peer, why)
            return False
        conn.hello, conn.nonce = hello, secrets.token_hex(16)
        data = challenge(self.token, hello, conn.nonce)
        with conn.lock, contextlib.suppress(OSError):  # a new connection: its buffer is empty
            return conn.sock.send(data, socket.MSG_DONTWAIT) == len(data)
        return False

    def _auth(self, conn: Conn, msg: dict[str, Any]) -> bool:
        """The rank proved the token: from now on the connection speaks for its hello's rank."""
        hello = conn.hello
        assert hello is not None
        if not authentic(self.token, hello, conn.nonce, msg):
            log.warning("control: dropped a connection from %s without the job's token (its "
                        "hello said rank %d on %r)", conn.peer, hello.rank, hello.host[:64])
            return False
        key = session_key(self.token, hello.nonce, conn.nonce)
        if hello.rank < 0:  # a host's hub: it speaks for the ranks that join through it
            conn.hub = hubs.HubLink(hello.host)
            conn.inn, conn.out = Seal(key, HUB_ROLE), Seal(key, "launcher")
        elif self._check_in(conn, None, hello) is None:
            return False
        else:
            conn.inn, conn.out = Seal(key, "rank"), Seal(key, "launcher")
        self._pending.leave(conn)
        return True

    def _check_in(self, conn: Conn, c: int | None, hello: Hello) -> int | None:
        """An authenticated rank, on its own connection or its hub's (``c``), claims its
        number (hello.claim): that number, or None: refused (logged)."""
        with self._lock:
            rank = self._ranks.check_in(conn, c, hello, self._clock())
        if isinstance(rank, str):
            log.warning("control: refused a connection from %s: %s", conn.peer, rank)
            return None
        if c is None:
            conn.rank = rank
        return rank

    def _from_hub(self, conn: Conn, hub: hubs.HubLink, msg: dict[str, Any]) -> None:
        """A hub's message: for the ranks it speaks for (hubs.py), others dropped."""
        kind = msg["t"]
        if kind == "join":
            self._join(conn, hub, msg)
        elif kind == "ev" and (ev := hubs.read_event(msg)) and ev[0] in hub.slots:
            self._handle(hub.slots[ev[0]], ev[1])
        elif kind == "beat":
            ages, steps = hubs.read_beat(msg)
            try:  # the step times first: the ages then say when each rank was last heard
                for c, step in steps:
                    if c in hub.slots:
                        self._handle(hub.slots[c], step)
            finally:  # ... even after a step report that failed: never a host aged by it
                now = self._clock()
                with self._lock:
                    for c, age in ages:
                        if c in hub.slots:
                            self._ranks.heard(hub.slots[c], now - age)
        elif kind == "left" and (left := hubs.slot(msg)) is not None and left in hub.slots:
            with self._lock:
                self._ranks.gone(hub.slots.pop(left), conn, self._clock())
        elif kind == "note":
            log.info("control: the hub on %s: %s", hub.host[:64], hubs.note(msg))

    def _join(self, conn: Conn, hub: hubs.HubLink, msg: dict[str, Any]) -> None:
        """A rank checked in with its hub: claimed as on its own connection, or dropped."""
        joined_ = hubs.read_join(msg, hub.host)
        c = hubs.slot(msg)
        if c is not None and c in hub.slots:  # a hub never numbers two connections alike
            with self._lock:
                self._ranks.gone(hub.slots.pop(c), conn, self._clock())
            joined_ = f"a second join for its connection {c}: both dropped"
        elif not isinstance(joined_, str):
            joined_ = outside(joined_[1], self.world) or joined_
        if isinstance(joined_, str):
            log.warning("control: the hub at %s: %s", conn.peer, joined_)
            if c is not None:
                send(conn, "drop", c=c)
        elif (rank := self._check_in(conn, *joined_)) is not None:
            hub.slots[joined_[0]] = rank
        else:
            send(conn, "drop", c=joined_[0])

    def _handle(self, rank: int, msg: dict[str, Any]) -> None:
        now = self._clock()
        kind = msg["t"]
        with self._lock:
            state = self._ranks.states.get(rank)
            if state is not None:
                state = updated(state, kind, msg, now)
                self._ranks.states[rank] = state
                self._doomed, ring = joined(self._doomed, state, kind)
                if ring is not None and self._doomed is not None:
                    self._send_rank(rank, "abort", ring=ring, lost=self._doomed.lost)
            if kind == "progress":  # a field of the wrong type is left out, never trusted
                self._progress = progress_of(msg, now)
            elif kind == "elastic_reset":
                self._resets = [*self._resets, now][-ELASTIC_KEPT:]
            elif kind == "preempt_committed":  # numbers only: (epoch, step)
                self.preempt_commit = (count(msg.get("epoch")), count(msg.get("step")))
            elif kind == "elastic_restored":  # numbers only, as for progress
                self._restores = [*self._restores, restored_of(msg, now)][-ELASTIC_KEPT:]
        if self._on_event is not None and kind not in ("hb", "steps"):
            self._on_event(to_event(msg, rank))

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            self.broadcast("hb")

    def broadcast(self, kind: str) -> None:
        """To every rank: through a hub, one message for all of its ranks."""
        with self._lock:
            conns = [c for c in self._conns if c.out is not None]
        for conn in conns:
            if conn.hub is None or kind == "hb":
                send(conn, kind)
            else:
                send(conn, "all", k=kind)

    def abort_ring(self, lost: int) -> int:
        """Rank ``lost`` is gone (--elastic): each rank whose ring had it is told to shut it
        down now (rank/abort.py; which ring: rounds.py). Returns how many were told."""
        with self._lock:
            gone = self._ranks.states.get(lost)
            told = [(rank, ring, (r.host, r.pid)) for rank in self._ranks.route
                    if rank != lost and (r := self._ranks.states.get(rank))
                    and (ring := ring_to_abort(r, gone))]
            if gone is not None and gone.forming_ring:  # at: its loss on the ranks' clocks
                at = time.time() - (self._clock() - (gone.gone_at or self._clock()))
                self._doomed = DoomedRound(lost, at, {who for _, _, who in told})
        for rank, ring, _ in told:
            self._send_rank(rank, "abort", ring=ring, lost=lost)
        return len(told)

    def _send_rank(self, rank: int, kind: str, **fields: Any) -> None:
        route = self._ranks.route.get(rank)
        if route is not None:
            conn, c = route
            if c is None:
                send(conn, kind, **fields)
            else:
                send(conn, "to", c=c, k=kind, f=fields)
