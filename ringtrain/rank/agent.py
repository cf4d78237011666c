"""The rank side of supervision: check in, heartbeat, report Horovod init, and a dead-man switch.

Started by ``ringtrain.rank.entry`` in every rank before the training script when the launcher set
``RINGTRAIN_CONTROL_ADDR``. Threads only, standard library only: it must cost nothing to import.

* ``hello`` tells the launcher this rank's host, PID and parent (the Open MPI daemon ``orted`` on
  remote hosts) with their start times, so teardown can end exactly these processes by PID.
  The launcher must answer it proving it holds the job's token (events.py's handshake) before
  the agent hears or tells it anything; the token itself never goes on the wire. A wrong
  proof, a line over ``MAX_LAUNCHER_LINE`` or nothing at all: the agent closes the connection
  and the dead-man switch below ends the rank, as for a launcher that never answered. A
  connection closed before the launcher's challenge (the launcher had no place for it: a flood
  of idle connections on its port, launch/control/admission.py) is tried again, a new
  connection and a new nonce, up to ``CHECKIN_TRIES`` times with a growing pause.
* An import hook (rank/hooks.py) wraps ``HorovodBasics.init`` (shared by every Horovod
  framework binding), so ``init`` is reported for any script, not just ringtrain's: the
  launcher tells which ranks have not arrived when start-up hangs; the sockets ``init`` opened
  are the ring's, which an ``abort`` from the launcher shuts down (rank/abort.py). Under a
  TF strategy another wraps the TensorFlow bindings where a task joins its cluster and waits
  for it holding the GIL (its heartbeats stop): ``tf_forming`` and ``tf_formed`` tell the
  launcher to wait for it.
* Dead-man switch: if the launcher is silent for ``RINGTRAIN_LAUNCHER_TIMEOUT`` seconds (killed,
  or this host cut off), the rank kills its own children, its ``orted`` parent and itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ringtrain.rank import abort, envvars, hooks, preempt, procfs, relay
from ringtrain.rank.events import (
    HEARTBEAT_S,
    LAUNCHER_EVENTS,
    MAX_LAUNCHER_LINE,
    PROTOCOL,
    Seal,
    answer,
    encode,
    identity,
    rank_seals,
)

CHECKIN_TRIES = 8  # connections closed before the challenge, then the rank gives up
RETRY_PAUSE_S = (0.1, 2.0)  # the pause after the first one, doubling, at most the second


def rank_from_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    for name in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return -1


class RankAgent:
    def __init__(self, addr: str, token: str, rank: int, launcher_timeout: float,
                 hub_run: str = "") -> None:
        host, _, port = addr.rpartition(":")
        self.hub_run = hub_run  # a run id: check in with this host's hub (rank/hub.py)
        self.addr = (host.strip("[]"), int(port))
        self.token = token
        self.rank = rank
        self.launcher_timeout = launcher_timeout
        self.last_heard = time.monotonic()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._nonce = os.urandom(16).hex()  # this connection's: the launcher's proof names it
        self._who = ""  # this rank's identity as its hello said it (events.identity)
        self._trusted = threading.Event()  # the launcher proved it holds the token
        self._noted = False  # a message from the launcher dropped (told once)
        self._in: Seal | None = None  # after the handshake: the launcher's messages, opened
        self._out: Seal | None = None  # ... and this rank's, sealed

    def start(self) -> bool:
        deadline = time.monotonic() + 10
        while self._sock is None:
            try:
                self._sock = self._connect()
            except OSError as err:
                if time.monotonic() > deadline:
                    _warn(f"cannot reach the launcher at {self.addr}: {err}; unsupervised")
                    return False
                time.sleep(0.5)
        self._sock.settimeout(None)
        self._hello()
        for target in (self._read, self._beat, self._watch):
            threading.Thread(
                target=target, name=f"ringtrain-{target.__name__}", daemon=True
            ).start()
        # the script's first words (init, api) wait for the launcher's proof: a round trip. A
        # launcher that gives none in time is none: the dead-man switch ends this rank
        self._trusted.wait(self.launcher_timeout)
        return True

    def _connect(self) -> socket.socket:
        """To the launcher, or under ``--control-hubs`` to this host's hub."""
        if not self.hub_run:
            return socket.create_connection(self.addr, timeout=3)
        from ringtrain.rank import hub  # noqa: PLC0415 - only under hubs
        sock = hub.connect(self.hub_run, os.environ.get(envvars.ATTEMPT, ""))
        if sock is None:  # supervised all the same, on a connection of its own
            _warn("no hub of this run answered on this host (ringtrain must be installed in "
                  "this Python for `python -I -m ringtrain.rank.hub`, not only on PYTHONPATH; "
                  "or another user holds its name): checking in with the launcher directly")
            self.hub_run = ""
            return socket.create_connection(self.addr, timeout=3)
        return sock

    def _hello(self) -> None:
        ppid = os.getppid()
        me = {"rank": self.rank, "host": socket.gethostname(), "pid": os.getpid(),
              "start": procfs.start_time(os.getpid()), "ppid": ppid,
              "parent": procfs.comm(ppid), "parent_start": procfs.start_time(ppid)}
        self._who = identity(me)  # the launcher's proof, and this rank's, cover it
        self._put(encode("hello", proto=PROTOCOL, nonce=self._nonce, **me))

    def send(self, kind: str, **fields: Any) -> None:
        """To the launcher, sealed, once it proved it holds the token (before that: dropped)."""
        out = self._out
        if self._trusted.is_set() and out is not None:
            # sealed under the lock: numbers go out in the order they were given
            self._put(lambda: out.seal(kind, rank=self.rank, **fields))

    def _put(self, data: bytes | Callable[[], bytes]) -> None:
        sock = self._sock
        if sock is None:
            return
        with self._lock, contextlib.suppress(OSError):
            sock.sendall(data if isinstance(data, bytes) else data())

    def done(self) -> None:
        """The script returned: say so at once (a blocking send, before finalisation)."""
        self.send("done")

    def api(self, **features: Any) -> None:
        """The script uses ringtrain's training API (``ringtrain.keras``): which parts."""
        self.send("api", **features)

    def _read(self) -> None:
        """The launcher's challenge first (answered with this rank's proof), then its
        messages; a line over ``MAX_LAUNCHER_LINE`` ends the connection."""
        stream = self._handshake()
        if stream is None:
            return
        with contextlib.suppress(OSError, ValueError), stream:
            while line := stream.readline(MAX_LAUNCHER_LINE + 1):
                if len(line) > MAX_LAUNCHER_LINE:
                    self._hang_up(f"sent a line over {MAX_LAUNCHER_LINE} bytes")
                    return
                try:
                    self._heard(line)
                except Exception as err:  # a message nobody foresaw: the reader goes on
                    _warn(f"a message from the launcher failed: {err!r}")

    def _handshake(self) -> io.BufferedReader | None:
        """The launcher's challenge, answered; the connection's stream, or None (hung up).
        A connection closed before the challenge is tried again (``CHECKIN_TRIES``)."""
        for tries in range(1, CHECKIN_TRIES + 1):
            sock = self._sock
            if sock is None:
                return None
            stream = sock.makefile("rb")
            try:
                first = stream.readline(MAX_LAUNCHER_LINE + 1)
            except (OSError, ValueError):  # reset: closed, as far as this rank can tell
                first = b""
            reply = answer(self.token, self._nonce, self._who, first) if first else None
            if reply is not None:
                self._put(reply)
                self._out, self._in = rank_seals(self.token, self._nonce, first)
                self.last_heard = time.monotonic()
                self._trusted.set()
                return stream
            stream.close()
            if first:
                self._hang_up("did not prove it holds the job's token")
                return None
            if tries == CHECKIN_TRIES or not self._again(tries):
                break
        self._hang_up(f"closed the connection before its challenge {CHECKIN_TRIES} times "
                      "(it refused this rank's hello, or had no place for it?)")
        return None

    def _again(self, tries: int) -> bool:
        """Check in again on a new connection, after a pause growing with ``tries``; False
        when the launcher cannot be reached."""
        low, high = RETRY_PAUSE_S
        time.sleep(min(high, low * 2 ** (tries - 1)) * (0.5 + secrets.SystemRandom().random()))
        old, self._sock = self._sock, None
        if old is not None:
            with contextlib.suppress(OSError):
                old.close()
        try:
            sock = self._connect()
        except OSError:
            return False
        sock.settimeout(None)
        self._nonce = os.urandom(16).hex()  # the proofs name this connection's nonce
        self._sock = sock
        self._hello()
        return True

    def _heard(self, line: bytes) -> None:
        """One line from the launcher, sealed for this connection, of a kind it sends; else
        dropped (and not a sign of life)."""
        msg = self._in.open(line) if self._in is not None else None
        kind = msg["t"] if msg is not None else None
        if kind not in LAUNCHER_EVENTS:
            if not self._noted:
                self._noted = True
                _warn(f"dropped a message from the launcher not sealed for this connection or "
                      f"not one of the protocol's ({line[:60]!r}), and will drop any more")
            return
        self.last_heard = time.monotonic()
        if kind == "stop":
            self._die("the launcher asked this rank to stop")
        elif kind == "finish":
            self._finish()
        elif kind == "preempt":  # rank 0's checkpoint callback commits now
            preempt.request()
        elif kind == "abort" and msg is not None:
            self._abort(msg)

    def _abort(self, msg: dict[str, Any]) -> None:
        """A rank of this ring is lost (the launcher saw it end or go silent): fail this
        rank's collectives now instead of after Gloo's timeout. Only the ring the launcher
        knew this rank in (``ring``: its generation); a ring formed since is left alone. The
        ring after it (a rank of the round forming now was lost): what this rank's running
        ``hvd.init()`` opens is shut down until it ends, in a thread of its own."""
        ring, lost = msg.get("ring"), msg.get("lost")
        if not isinstance(ring, int) or isinstance(ring, bool):
            return
        who = f"rank {lost}" if isinstance(lost, int) and not isinstance(lost, bool) else (
            "a rank")
        if ring == abort.generation() + 1:
            threading.Thread(target=self._abort_forming, args=(ring, who),
                             name="ringtrain-abort-forming", daemon=True).start()
            return
        shut = abort.abort(ring)
        if shut:
            _warn(f"the launcher says {who} of this ring is lost: shut down this rank's "
                  f"{shut} ring connection(s), so its collectives fail now, not after Gloo's "
                  "timeout")

    @staticmethod
    def _abort_forming(ring: int, who: str) -> None:
        limit = gloo_timeout_s()
        shut = abort.abort_forming(ring, limit)
        if shut:
            _warn(f"the launcher says {who} of the round forming now is lost: shut down the "
                  f"{shut} connection(s) hvd.init() opened for it, so it fails now, not after "
                  f"Gloo's timeout ({limit:.0f} s)")

    def _hang_up(self, why: str) -> None:
        """Whatever answered at the launcher's address is not to be heard: close the
        connection; the dead-man switch then ends this rank, as when no launcher answers."""
        _warn(f"what answered at {self.addr} {why}: not heard; closing the connection")
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _beat(self) -> None:
        while True:
            self.send("hb")
            time.sleep(HEARTBEAT_S)

    def _watch(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            if now - last > 2.0:
                # This process was frozen (TensorFlow held the GIL while its cluster formed,
                # or a SIGSTOP). The launcher's messages wait unread in the socket; the reader
                # has had no turn either: the frozen span is not the launcher's silence.
                self.last_heard = min(now, self.last_heard + (now - last - 0.5))
            last = now
            silent = now - self.last_heard
            if silent > self.launcher_timeout:
                self._die(f"no word from the launcher for {silent:.0f} s")

    def _finish(self) -> None:
        """The job is over (tf-ps: the chief finished): a task that only serves says "done" and
        exits 0 at once; ``server.join()`` never returns by itself."""
        self.done()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)

    def _die(self, why: str) -> None:
        ppid = os.getppid()
        daemon = procfs.comm(ppid) in procfs.DAEMON_NAMES
        _warn(
            f"{why}; ending rank {self.rank} (pid {os.getpid()})"
            + (f" and its Open MPI daemon (pid {ppid})" if daemon else "")
        )
        hubs = sys.modules.get("ringtrain.rank.hub")  # its host's other ranks still need it
        _kill_children(os.getpid(), tuple(getattr(hubs, "SPAWNED", ())))
        if daemon:
            session = procfs.ssh_session_of(ppid)
            with contextlib.suppress(OSError):
                os.kill(ppid, signal.SIGKILL)
            if session is not None:
                # the link is gone: the sshd session that started the daemon would wait for
                # TCP to time out (many minutes) to report the daemon's exit to nobody
                with contextlib.suppress(OSError):
                    os.kill(session, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _kill_children(pid: int, spare: tuple[int, ...] = ()) -> None:
    for child in procfs.children(pid):
        if child in spare:
            continue
        _kill_children(child)
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def _warn(text: str) -> None:
    with contextlib.suppress(OSError):
        sys.stderr.write(f"ringtrain rank agent: {text}\n")
        sys.stderr.flush()


_AGENT: RankAgent | relay.RelaySender | None = None


def agent() -> RankAgent | relay.RelaySender | None:
    """This rank's line to the launcher: the agent the rank entry started, or, in a program
    the entry runs as its child (a wrapper script's ``python train.py``), the relay to it."""
    if _AGENT is None and envvars.RELAY_FD in os.environ:
        return start_from_env()
    return _AGENT


def start_from_env() -> RankAgent | relay.RelaySender | None:
    """Start the agent when the launcher asked for supervision; None otherwise."""
    global _AGENT  # noqa: PLW0603 - one agent per rank process
    addr = os.environ.get(envvars.CONTROL_ADDR)
    token = os.environ.get(envvars.CONTROL_TOKEN, "")
    if _AGENT is not None:
        return _AGENT
    if not addr:
        sender = relay.from_env()
        if sender is not None:
            _AGENT = sender
            _report_init(sender)
        return _AGENT
    timeout = float(os.environ.get(envvars.LAUNCHER_TIMEOUT, "15"))
    hub_run = os.environ.get(envvars.RUN_ID, "") if os.environ.get(envvars.CONTROL_HUB) else ""
    candidate = RankAgent(addr, token, rank_from_env(), timeout, hub_run)
    if not candidate.start():
        return None
    _AGENT = candidate
    _report_init(candidate)
    return candidate


def gloo_timeout_s(environ: Any = os.environ) -> float:
    """Horovod's Gloo timeout (``HOROVOD_GLOO_TIMEOUT_SECONDS``, 30 s by default): as long as
    a doomed round's init could wait."""
    value = str(environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", ""))
    return float(value) if value.isdigit() and int(value) > 0 else 30.0


def _report_init(line: RankAgent | relay.RelaySender) -> None:
    """Horovod's init for every job; TensorFlow's cluster forming under a TF strategy."""
    def report_init(hvd: Any) -> None:
        line.send("init", size=hvd.size(), local_rank=hvd.local_rank(), hvd_rank=hvd.rank(),
                  ring=abort.generation())

    def report_begin() -> None:
        # when this process started: the launcher tells a process of a doomed round from the
        # lost rank's replacement by it (launch/control/rounds.py)
        line.send("init_begin", started=procfs.started_at())

    hooks.on_import(hooks.HOROVOD_BASICS,
                    lambda module: hooks.wrap_init(module, report_init, report_begin))
    hooks.on_import(hooks.HOROVOD_ELASTIC, hooks.wrap_elastic_run)
    if os.environ.get(envvars.TF_CLUSTER):
        hooks.on_import(hooks.TF_BINDINGS, lambda module: hooks.wrap_tf_join(module, line.send))
