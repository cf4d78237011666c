"""One process per host speaking to the launcher for that host's ranks (``--control-hubs``).

With one connection per rank the launcher reads a heartbeat and a step-time message from every
rank every second, each with a MAC: at 80,000 ranks 2.5 cores and a 93 ms tick
(bench/launcher/control_scale.py). Under hubs each rank checks in with its host's hub exactly
as it would with the launcher (rank/agent.py, unchanged: hello, challenge, auth, then sealed
messages both ways; the hub holds the job's token as the rank does), and the hub holds one
connection to the launcher, where it checks in as ``role: hub`` by the same handshake.

* A rank's heartbeats stop at the hub. Once a second the hub sends one ``beat``: for each of
  its ranks how long ago it last heard it (``a``), and the step times its ranks reported since
  (``s``). So a rank that goes silent is still named as a rank: its age grows while its
  host's others stay fresh; a host whose hub goes silent (lost, cut off) ages every rank on it
  at once and is named as a host.
* Anything else a rank says is passed on at once (``ev``); a rank's connection that ends is
  told at once (``left``); a rank that checked in is ``join`` with its hello's identity (the
  launcher checks and claims it as for a direct connection and may ``drop`` it).
* The launcher's ``hb`` is passed to every rank (their dead-man switches hear the launcher,
  not the hub); ``to`` one rank and ``all`` carry the launcher's other messages (stop, abort,
  finish, preempt). The hub never makes one of its own.
* The hub listens on an abstract Unix socket named by the user and the run (one per network
  namespace: one per host, and per simulated host); a connecting process of another user is
  refused (SO_PEERCRED). The first rank of a host that finds no hub starts one; two that start
  one together race for the name and the loser exits.
* It ends when the launcher's connection ends or the launcher is silent for the ranks'
  launcher timeout, at once when its last rank is gone (the job ended on this host: the
  teardown finds nothing of it), and when no rank came within ``IDLE_S``. A hub that dies ends its
  host's connections: the launcher sees the host lost, the ranks their launcher gone.

Standard library only. Its output goes nowhere (it must not hold a rank's log open); what it
has to say goes to the launcher as ``note``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ringtrain.rank import envvars, isolated, procfs
from ringtrain.rank.events import (
    HEARTBEAT_S,
    HUB_ROLE,
    LAUNCHER_EVENTS,
    MAX_LAUNCHER_LINE,
    MAX_LINE,
    PROTOCOL,
    RANK_EVENTS,
    Seal,
    answer,
    decode,
    encode,
    identity,
    is_nonce,
    launcher_proof,
    rank_proof,
    same,
    session_key,
)
from ringtrain.rank.warmstand import peer_uid

IDLE_S = 10.0  # no rank came this long after the hub started: it ends
HELLO_S = 10.0  # a rank's handshake with the hub
MAX_HUB_LINE = 4096  # launcher -> hub
MAX_BACKLOG = 4 << 20  # bytes for a launcher that stopped reading, then the hub ends
RANK_LINE = MAX_LINE - 512  # a rank's line, room left for the hub's wrapping of it
STEPS_A_BEAT = 100  # step-time reports in one beat (more: another beat, same second)
SPAWNED: list[int] = []  # the hubs this process started (a rank's _die spares them)


def address(run_id: str, attempt: str) -> str:
    """The hub's abstract socket name for this user, run and attempt (a hub of an earlier
    attempt, still waiting out its launcher's silence on a lost host, is not this one's)."""
    return f"\0ringtrain-hub-{os.getuid()}-{run_id[:64]}-{attempt[:8]}"


def connect(run_id: str, attempt: str, deadline_s: float = 10.0) -> socket.socket | None:
    """A connection to this host's hub, starting one when none answers; None when none came
    within ``deadline_s``. A name held by another user's process is no hub of ours (abstract
    names have no permissions: anyone may bind one first): None at once."""
    name = address(run_id, attempt)
    started = False
    end = time.monotonic() + deadline_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(name)
        except OSError:
            sock.close()
        else:
            if peer_uid(sock) == os.getuid():
                return sock
            sock.close()
            return None
        if time.monotonic() > end:
            return None
        if not started:
            started = True
            hub = subprocess.Popen(
                isolated.module_argv(sys.executable, "ringtrain.rank.hub"),
                cwd=isolated.NEUTRAL_DIR,
                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            SPAWNED.append(hub.pid)
            # reaped whenever it ends (one that lost the race for the name: at once)
            threading.Thread(target=hub.wait, name="ringtrain-hub-reap", daemon=True).start()
        time.sleep(0.05)


@dataclass(eq=False)
class _Rank:
    """One rank's connection to the hub."""

    sock: socket.socket
    c: int  # the hub's number for it (the launcher's name for this connection)
    opened: float
    buffer: bytearray = field(default_factory=bytearray)
    hello: dict[str, Any] | None = None
    nonce: str = ""  # the hub's, in its challenge
    inn: Seal | None = None
    out: Seal | None = None
    heard: float = 0.0


class Hub:
    def __init__(self, listen: socket.socket, launcher: socket.socket, token: str,
                 launcher_timeout: float) -> None:
        self.listen, self.launcher, self.token = listen, launcher, token
        self.launcher_timeout = launcher_timeout
        self.sel = selectors.DefaultSelector()
        self.sel.register(listen, selectors.EVENT_READ, None)
        self.sel.register(launcher, selectors.EVENT_READ, "launcher")
        self.ranks: dict[int, _Rank] = {}
        self.next_c = 0
        self.inn: Seal | None = None
        self.out: Seal | None = None
        self.from_launcher = bytearray()
        self.served = False  # a rank checked in with it (then its last leaving ends it)
        self.steps: list[list[Any]] = []  # [c, steps message] since the last beat
        self.backlog = bytearray()  # sealed lines for the launcher not sent yet
        self.heard_launcher = time.monotonic()
        self.last_rank = time.monotonic()

    # ------------------------------------------------------------- the launcher
    def check_in(self) -> bool:
        """The hub's own handshake with the launcher (as a rank's: events.py)."""
        me = {"host": socket.gethostname(), "pid": os.getpid(),
              "start": procfs.start_time(os.getpid())}
        nonce = os.urandom(16).hex()
        self.launcher.sendall(encode("hello", proto=PROTOCOL, role=HUB_ROLE, nonce=nonce, **me))
        self.launcher.settimeout(HELLO_S)
        first = self.launcher.makefile("rb").readline(MAX_LAUNCHER_LINE + 1)
        reply = answer(self.token, nonce, identity(me), first) if first else None
        if reply is None:
            return False
        self.launcher.sendall(reply)
        msg = decode(first)
        key = session_key(self.token, nonce, str(msg["nonce"]) if msg else "")
        self.inn, self.out = Seal(key, "launcher"), Seal(key, HUB_ROLE)
        self.launcher.setblocking(False)
        return True

    def tell(self, kind: str, **fields: Any) -> None:
        """Queued whole and sent as the launcher's socket takes it: never a line in part,
        never the hub's loop blocked on a launcher that stopped reading."""
        assert self.out is not None
        self.backlog += self.out.seal(kind, **fields)
        self.flush()

    def flush(self) -> bool:
        """Send what the socket takes now; False when more than ``MAX_BACKLOG`` waits."""
        if self.backlog:
            try:
                del self.backlog[: self.launcher.send(self.backlog)]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # the connection broke: its reader sees the end
                self.backlog.clear()
        return len(self.backlog) <= MAX_BACKLOG

    def from_the_launcher(self) -> bool:
        """Read what the launcher sent; False when its connection ended."""
        try:
            data = self.launcher.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self.from_launcher += data
        while (end := self.from_launcher.find(b"\n")) >= 0:
            line = bytes(self.from_launcher[: end + 1])
            del self.from_launcher[: end + 1]
            assert self.inn is not None
            msg = self.inn.open(line) if len(line) <= MAX_HUB_LINE else None
            if msg is not None:
                self.heard_launcher = time.monotonic()
                self.obey(msg)
        return len(self.from_launcher) <= MAX_HUB_LINE

    def obey(self, msg: dict[str, Any]) -> None:
        kind = msg["t"]
        if kind == "hb":
            for rank in list(self.ranks.values()):
                self.to_rank(rank, "hb")
        elif kind == "all" and msg.get("k") in LAUNCHER_EVENTS:
            for rank in list(self.ranks.values()):
                self.to_rank(rank, str(msg["k"]))
        elif kind in ("to", "drop") and isinstance(msg.get("c"), int):
            one = self.ranks.get(msg["c"])
            if one is None:
                return
            if kind == "drop":
                self.close(one, tell=False)
            elif msg.get("k") in LAUNCHER_EVENTS and isinstance(msg.get("f"), dict):
                self.to_rank(one, str(msg["k"]), **msg["f"])

    # ------------------------------------------------------------- the ranks
    def accept(self) -> None:
        with contextlib.suppress(OSError):
            sock, _ = self.listen.accept()
            if peer_uid(sock) != os.getuid():  # another user's process: not a rank of this job
                sock.close()
                return
            sock.setblocking(False)
            rank = _Rank(sock, self.next_c, time.monotonic())
            self.next_c += 1
            self.ranks[rank.c] = rank
            self.sel.register(sock, selectors.EVENT_READ, rank)
            self.last_rank = time.monotonic()

    def from_rank(self, rank: _Rank) -> None:
        try:
            data = rank.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close(rank)
            return
        rank.buffer += data
        while (end := rank.buffer.find(b"\n")) >= 0:
            line = bytes(rank.buffer[: end + 1])
            del rank.buffer[: end + 1]
            if len(line) > RANK_LINE + 1 or not self.line(rank, line):
                self.close(rank)
                return
        if len(rank.buffer) > RANK_LINE:
            self.close(rank)

    def line(self, rank: _Rank, line: bytes) -> bool:
        """One line of a rank; False: close its connection."""
        if rank.inn is None:  # the handshake, the launcher's part played by the hub
            msg = decode(line)
            return msg is not None and self.handshake(rank, msg)
        msg = rank.inn.open(line)
        if msg is None or msg["t"] not in RANK_EVENTS:
            return True  # dropped, as the launcher drops it
        rank.heard = time.monotonic()
        kind = msg.pop("t")
        msg.pop("seq", None)
        if kind == "steps":
            self.steps.append([rank.c, msg])
        elif kind != "hb":
            self.tell("ev", c=rank.c, k=kind, f=msg)
        return True

    def handshake(self, rank: _Rank, msg: dict[str, Any]) -> bool:
        """The rank's hello (answered with the hub's challenge), then its auth (its identity
        told to the launcher: ``join``); False: close its connection."""
        if rank.hello is None:
            if msg["t"] != "hello" or not is_nonce(msg.get("nonce")):
                return False
            rank.hello, rank.nonce = msg, os.urandom(16).hex()
            proof = launcher_proof(self.token, msg["nonce"], rank.nonce, identity(msg))
            self.raw(rank, encode("challenge", nonce=rank.nonce, proof=proof))
            return True
        hello = rank.hello
        if msg["t"] != "auth" or not same(msg.get("proof"), rank_proof(
                self.token, hello["nonce"], rank.nonce, identity(hello))):
            return False
        key = session_key(self.token, hello["nonce"], rank.nonce)
        self.served = True
        rank.inn, rank.out, rank.heard = Seal(key, "rank"), Seal(key, "launcher"), \
            time.monotonic()
        self.tell("join", c=rank.c, hello={k: v for k, v in hello.items()
                                           if k not in ("t", "nonce")})
        return True

    def raw(self, rank: _Rank, data: bytes) -> None:
        with contextlib.suppress(OSError):
            rank.sock.send(data, socket.MSG_DONTWAIT)

    def to_rank(self, rank: _Rank, kind: str, **fields: Any) -> None:
        if rank.out is not None:  # never block on a rank that stopped reading: dropped
            self.raw(rank, rank.out.seal(kind, **fields))

    def close(self, rank: _Rank, tell: bool = True) -> None:
        if self.ranks.pop(rank.c, None) is None:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.sel.unregister(rank.sock)
        with contextlib.suppress(OSError):
            rank.sock.close()
        if tell and rank.inn is not None:
            self.tell("left", c=rank.c)
        self.last_rank = time.monotonic()

    # ------------------------------------------------------------- the loop
    def beat(self, now: float) -> None:
        ages = [[r.c, round(now - r.heard, 2)] for r in self.ranks.values() if r.inn is not None]
        steps, self.steps = self.steps, []
        self.tell("beat", a=ages, s=steps[:STEPS_A_BEAT])
        for at in range(STEPS_A_BEAT, len(steps), STEPS_A_BEAT):
            self.tell("beat", a=[], s=steps[at:at + STEPS_A_BEAT])
        for rank in [r for r in self.ranks.values()
                     if r.inn is None and now - r.opened > HELLO_S]:
            self.close(rank)

    def run(self) -> str:
        """Serve until the launcher or the ranks are gone; why it ended."""
        next_beat = time.monotonic()
        while True:
            self.sel.modify(self.launcher, selectors.EVENT_READ | (
                selectors.EVENT_WRITE if self.backlog else 0), "launcher")
            for key, events in self.sel.select(timeout=0.25):
                if key.data is None:
                    self.accept()
                elif key.data == "launcher":
                    if events & selectors.EVENT_READ and not self.from_the_launcher():
                        return "the launcher's connection ended"
                else:
                    self.from_rank(key.data)
            if not self.flush():
                return f"the launcher read nothing while {MAX_BACKLOG >> 20} MiB waited"
            now = time.monotonic()
            if now >= next_beat:
                self.beat(now)
                next_beat = now + HEARTBEAT_S
            if now - self.heard_launcher > self.launcher_timeout:
                return f"no word from the launcher for {now - self.heard_launcher:.0f} s"
            if not self.ranks and (self.served or now - self.last_rank > IDLE_S):
                self.accept()  # one that came meanwhile is served; else the name is let go
                if not self.ranks:
                    # at once when its last rank is gone: the job's end on this host (teardown
                    # finds nothing of it); a rank that comes later starts a hub of its own
                    self.listen.close()
                    return ("its last rank is gone" if self.served
                            else f"no rank in {IDLE_S:g} s")


def main() -> int:
    run_id = os.environ.get(envvars.RUN_ID, "")
    addr = os.environ.get(envvars.CONTROL_ADDR, "")
    token = os.environ.get(envvars.CONTROL_TOKEN, "")
    if not (run_id and addr and token):
        return 2
    listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listen.bind(address(run_id, os.environ.get(envvars.ATTEMPT, "")))
    except OSError:  # another rank's hub took the name first: that one serves
        return 0
    listen.listen(1024)
    listen.setblocking(False)
    host, _, port = addr.rpartition(":")
    try:
        launcher = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
    except (OSError, ValueError):
        return 1
    hub = Hub(listen, launcher, token,
              float(os.environ.get(envvars.LAUNCHER_TIMEOUT, "15")))
    try:
        if not hub.check_in():
            return 1
    except OSError:
        return 1
    why = hub.run()
    hub.tell("note", text=f"hub ends: {why}")
    with contextlib.suppress(OSError):
        launcher.settimeout(1.0)
        launcher.sendall(hub.backlog)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
