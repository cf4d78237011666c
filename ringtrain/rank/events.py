"""The rank <-> launcher control protocol: newline-delimited JSON messages. Pure.

Ranks connect to ``RINGTRAIN_CONTROL_ADDR`` (host:port). Both sides hold the job's token
(``RINGTRAIN_CONTROL_TOKEN``) and each proves it to the other without sending it:

1. rank -> launcher ``hello``: rank, host, pid, start, ppid, parent (the parent's command
   name, e.g. ``orted``), parent_start, and ``nonce``, fresh random hex (``NONCE_HEX`` digits);
2. launcher -> rank ``challenge``: its own fresh ``nonce`` and ``proof``,
   ``launcher_proof(token, rank nonce, launcher nonce, identity)`` (HMAC-SHA256; ``identity``:
   the hello's ``IDENTITY`` fields as it was received, so a relay without the token cannot
   change the rank, host or PIDs a hello names: the rank's proof, and its check of the
   launcher's, are over what the rank itself said). The rank reads
   nothing else first: a wrong proof, another message or a line over ``MAX_LAUNCHER_LINE``
   and it closes the connection and waits for a launcher that never comes (its dead-man
   switch), so whatever sits at the address without the token cannot steer it;
3. rank -> launcher ``auth``: ``proof``, ``rank_proof(token, rank nonce, launcher nonce,
   identity)``. The
   launcher hears nothing else from the connection before it, and then the connection speaks
   for the rank of its hello alone, whatever a message's own ``rank`` field says; a second
   connection for a rank (same host and PID) still connected is refused.

Every message after those three, both ways, is sealed (``Seal``): it carries ``seq``, a number
the sender raises with each message, and ends with a tab and a MAC, HMAC-SHA256 (first 128
bits) under ``session_key(token, rank nonce, launcher nonce)`` over the sender's role and the
JSON. The receiver drops a line whose MAC is wrong or whose ``seq`` is not above the last it
took: a message forged, altered, replayed or moved into another connection is never heard,
even from whoever can rewrite the traffic between the hosts (a beat the launcher drops for a
rank that stopped reading leaves a gap, which is fine).

Then, rank -> launcher (``RANK_EVENTS``; any other kind is dropped):

* ``init``     Horovod finished ``hvd.init()``: rank, size, local_rank, ring (how many rings
  this process has formed: rank/abort.py) (``init_begin`` before)
* ``tf_forming`` / ``tf_formed``  the rank enters / leaves TensorFlow's wait for the other
  tasks of its cluster (MultiWorkerMirroredStrategy, the parameter-server coordinator), where
  TensorFlow holds the GIL and so stops this rank's heartbeats
* ``hb``       heartbeat, every ``HEARTBEAT_S``
* ``progress`` epoch, step, loss, samples_per_s (rank 0, from the training callback)
* ``steps``    every rank, about once a second: ``n`` steps in the window, the mean
  ``compute`` (step start until the rank's gradients are ready for the all-reduce: its own
  work, whatever the others do) and ``wall`` (the whole step) in seconds
* ``api``      the script uses ringtrain.keras: ``checkpoint`` (URL) and/or ``progress``
* ``done``     the script returned (or exited 0); interpreter finalisation follows
* ``preempt_committed``  epoch, step: rank 0 committed the checkpoint a ``preempt`` asked for
* ``elastic_reset`` / ``elastic_restored``  --elastic: the ring forms again / rank 0 restored
  the state (source, epoch, step, size, nbytes)

and launcher -> rank (``LAUNCHER_EVENTS``; any other kind is dropped, not heard): ``hb`` every
``HEARTBEAT_S``; ``stop`` (a fault: the rank ends itself and its daemon); ``finish`` (tf-ps:
the chief is done; a serving task says ``done`` and exits 0); ``preempt`` (SIGUSR1 reached
the launcher: rank 0 commits a checkpoint at its next batch end); ``abort`` ring, lost
(--elastic: a rank of ring ``ring`` is lost; the rank shuts down that ring's sockets so its
collectives fail now, and ignores it when it formed a newer ring since). A rank that hears nothing
from the launcher for its ``RINGTRAIN_LAUNCHER_TIMEOUT`` ends itself and its Open MPI daemon (a
dead-man switch), so a partitioned host cannot keep the job's processes alive after the
launcher gave up on it.

The channel is plain TCP, not encrypted: whoever reads the traffic between the hosts reads the
messages (progress, host names, PIDs; never the token), but cannot forge or alter one
(docs/THREAT_MODEL.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The control channel's version: a rank's hello carries it, the launcher refuses another, and
# the pre-flight probe reads it from each host's ringtrain (hostprobe.VERSIONS_PY). Raise it
# with any change a rank and a launcher of different releases would misread.
PROTOCOL = 2  # 2: the proofs cover the hello's identity (IDENTITY)
HEARTBEAT_S = 1.0
MAX_LINE = 64 * 1024  # rank -> launcher
MAX_LAUNCHER_LINE = 1024  # launcher -> rank: its messages are short
NONCE_HEX = 32  # 16 random bytes
HUB_ROLE = "hub"  # a host's hub (rank/hub.py): its hello's role, its seal's sender
RANK_EVENTS = frozenset({
    "hb", "init_begin", "init", "tf_forming", "tf_formed", "progress", "steps", "api", "done",
    "preempt_committed", "elastic_reset", "elastic_restored"})
LAUNCHER_EVENTS = frozenset({"hb", "stop", "finish", "preempt", "abort"})


@dataclass(frozen=True, slots=True)
class RankEvent:
    kind: str
    rank: int
    fields: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.fields:
            if k == key:
                return v
        return default


# how a rank's entry prints a ringtrain error instead of a traceback; the launcher names a
# failed rank whose log has it (launch/job/run.py), as it does one with a traceback
ERROR_MARK = "ringtrain: error:"


def encode(kind: str, **fields: Any) -> bytes:
    return (json.dumps({"t": kind, **fields}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any] | None:
    """One message, or None when the line is not a JSON object with a string ``t``."""
    if len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: "[[[[..."
        return None
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        return None
    return data


def to_event(data: dict[str, Any], rank: int) -> RankEvent:
    fields = tuple(sorted((k, v) for k, v in data.items() if k not in ("t", "seq", "token")))
    return RankEvent(kind=str(data["t"]), rank=rank, fields=fields)


def count(value: Any) -> int | None:
    """A whole number >= 0 as the protocol carries it (a bool or a string is not one)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None


def number(value: Any) -> float | None:
    """A finite number (loss, samples/s), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def is_nonce(value: Any) -> bool:
    """``NONCE_HEX`` lower-case hex digits."""
    return (isinstance(value, str) and len(value) == NONCE_HEX
            and all(c in "0123456789abcdef" for c in value))


# the hello's fields that say who the rank is: the proofs cover them (teardown ends these PIDs)
IDENTITY = ("rank", "host", "pid", "start", "ppid", "parent", "parent_start")


def identity(hello: Mapping[str, Any]) -> str:
    """The hello's ``IDENTITY`` fields as one text (absent ones as null), what the proofs
    cover; the rank computes it from what it sends, the launcher from what it received."""
    return json.dumps([hello.get(k) for k in IDENTITY], separators=(",", ":"))


def _proof(token: str, role: str, rank_nonce: str, launcher_nonce: str, who: str) -> str:
    text = f"ringtrain control\n{role}\n{rank_nonce}\n{launcher_nonce}\n{who}"
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()


def launcher_proof(token: str, rank_nonce: str, launcher_nonce: str, who: str) -> str:
    """What the launcher's ``challenge`` carries: it holds the token, and answers this hello
    (its nonce and ``who``, its ``identity``)."""
    return _proof(token, "launcher", rank_nonce, launcher_nonce, who)


def rank_proof(token: str, rank_nonce: str, launcher_nonce: str, who: str) -> str:
    """What the rank's ``auth`` carries (another role: a launcher's proof cannot be sent back)."""
    return _proof(token, "rank", rank_nonce, launcher_nonce, who)


def answer(token: str, rank_nonce: str, who: str, line: bytes) -> bytes | None:
    """The rank's ``auth`` line for the launcher's first line, or None when that line is not a
    ``challenge`` proving the token for this ``rank_nonce`` and this rank's ``identity``
    (``who``): a hello relabelled on its way is not answered."""
    msg = decode(line) if len(line) <= MAX_LAUNCHER_LINE else None
    if msg is None or msg["t"] != "challenge" or not is_nonce(msg.get("nonce")):
        return None
    theirs = msg["nonce"]
    if not same(msg.get("proof"), launcher_proof(token, rank_nonce, theirs, who)):
        return None
    return encode("auth", proof=rank_proof(token, rank_nonce, theirs, who))


def session_key(token: str, rank_nonce: str, launcher_nonce: str) -> bytes:
    """The key of one connection's sealed messages (both nonces: fresh per connection)."""
    text = f"ringtrain session\n{rank_nonce}\n{launcher_nonce}"
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).digest()


MAC_HEX = 32


class Seal:
    """One direction of one connection: ``seal`` for the sender (role ``launcher`` or
    ``rank``), ``open`` for the receiver. Not thread-safe: the caller's lock covers it."""

    def __init__(self, key: bytes, sender: str) -> None:
        self._key, self._sender = key, sender.encode() + b"\n"
        self._n = 0  # the last number sealed, or opened

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, self._sender + body, hashlib.sha256).hexdigest()[
            :MAC_HEX].encode()

    def seal(self, kind: str, **fields: Any) -> bytes:
        """One message: ``seq`` and ``t`` are the seal's, whatever ``fields`` say."""
        self._n += 1
        body = json.dumps({**fields, "t": kind, "seq": self._n}, separators=(",", ":")).encode()
        return body + b"\t" + self._mac(body) + b"\n"

    def open(self, line: bytes) -> dict[str, Any] | None:
        """The message, or None: not sealed by the other end of this connection, or not
        newer than the last one taken."""
        body, tab, mac = line.rstrip(b"\n").rpartition(b"\t")
        if not tab or not hmac.compare_digest(mac, self._mac(body)):
            return None
        msg = decode(body)
        n = count(msg.get("seq")) if msg is not None else None
        if msg is None or n is None or n <= self._n:
            return None
        self._n = n
        return msg


def rank_seals(token: str, rank_nonce: str, challenge: bytes) -> tuple[Seal, Seal]:
    """A rank's (its own, the launcher's) seals after ``answer`` accepted ``challenge``."""
    msg = decode(challenge)
    key = session_key(token, rank_nonce, str(msg["nonce"]) if msg is not None else "")
    return Seal(key, "rank"), Seal(key, "launcher")


def same(value: Any, expected: str) -> bool:
    """``value`` is the string ``expected``, compared in constant time (any type, any text:
    ``hmac.compare_digest`` itself refuses a str that is not ASCII)."""
    return isinstance(value, str) and hmac.compare_digest(
        value.encode(errors="replace"), expected.encode())
