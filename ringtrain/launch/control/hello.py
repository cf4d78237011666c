"""The launcher's side of a rank's check-in (the handshake in rank/events.py). PURE.

``read_hello`` checks every field of a ``hello`` (a field of the wrong type refuses the
connection, never reaches the server's state); ``outside`` refuses a rank the job has no place
for; ``challenge`` is the launcher's answer, proving it holds the job's token for this hello's
nonce; ``authentic`` checks the rank's ``auth`` against both nonces; ``claim`` says which rank
an authenticated hello speaks for, or why none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringtrain.launch.record.snapshot import RankState
from ringtrain.rank.events import (
    PROTOCOL,
    count,
    encode,
    identity,
    is_nonce,
    launcher_proof,
    rank_proof,
    same,
)
from ringtrain.version import __version__

MAX_NAME = 255


@dataclass(frozen=True, slots=True)
class Hello:
    """What a rank said of itself, its fields checked; ``nonce`` is its fresh random hex;
    ``who``: its identity fields as received (events.identity), what the proofs cover."""

    rank: int
    host: str
    pid: int
    nonce: str
    start: int | None = None
    ppid: int | None = None
    parent: str = ""
    parent_start: int | None = None
    who: str = ""


def read_hello(msg: dict[str, Any]) -> Hello | str:
    """The hello, or what was wrong with the message (for the log: a bounded text). A rank of
    another ringtrain release (another ``PROTOCOL``; none before there was one) is refused by
    name, with the fix."""
    if msg.get("t") != "hello":
        return f"a {str(msg.get('t'))[:40]!r} before the hello"
    proto = msg.get("proto", 0)
    if proto != PROTOCOL:
        who = f"rank {str(msg.get('rank'))[:12]} on {str(msg.get('host'))[:MAX_NAME]}"
        return (f"{who} speaks ringtrain control protocol {str(proto)[:12]}, this launcher "
                f"{PROTOCOL} (ringtrain {__version__}): install ringtrain {__version__} in "
                "the ranks' Python on that host (README: On the GPU hosts)")
    bad = [k for k in ("rank", "pid") if count(msg.get(k)) is None]
    bad += [k for k in ("start", "ppid", "parent_start")
            if msg.get(k) is not None and count(msg.get(k)) is None]
    bad += [k for k in ("host", "parent") if not isinstance(msg.get(k, ""), str)
            or len(msg.get(k, "")) > MAX_NAME]
    bad += [] if is_nonce(msg.get("nonce")) else ["nonce"]
    if bad:
        return "a hello with bad fields: " + ", ".join(
            f"{k}={str(msg.get(k))[:40]!r}" for k in bad)
    return Hello(
        rank=int(msg["rank"]),
        host=str(msg.get("host", "?")),
        pid=int(msg["pid"]),
        nonce=str(msg["nonce"]),
        start=count(msg.get("start")),
        ppid=count(msg.get("ppid")),
        parent=str(msg.get("parent", "")),
        parent_start=count(msg.get("parent_start")),
        who=identity(msg),
    )


def outside(hello: Hello, world: int) -> str | None:
    """Why the job has no place for this hello's rank (``world``: the most ranks it may run,
    0: not known), or None."""
    if world and hello.rank >= world:
        return (f"rank {hello.rank} on {hello.host[:64]!r} (pid {hello.pid}) is outside this "
                f"job's ranks 0-{world - 1}")
    return None


def claim(hello: Hello, held: RankState | None, elastic: bool, fresh: int) -> int | str:
    """The rank an authenticated hello speaks for, or why it is refused. ``held``: what
    already checked in as that rank; ``fresh``: a number none has (--elastic only).

    The same process again (host and PID) takes its rank back once its first connection is
    gone, never while it is connected. Another process under a held number: without --elastic
    a rank's number is its identity for the whole attempt, so the first to prove the token
    keeps it and the other is refused (never renumbered); under --elastic Horovod numbers
    ranks again after a reset, so a process that joins may be given a number still in use:
    it gets ``fresh``, the holder keeps its own."""
    if held is None:
        return hello.rank
    who = f"pid {held.pid} on {held.host[:64]!r}"
    if (held.host, held.pid) == (hello.host, hello.pid):
        if held.connected:
            return f"a second connection for rank {hello.rank} ({who}); the first one stays"
        return hello.rank
    if elastic:
        return fresh
    return (f"rank {hello.rank} claimed by pid {hello.pid} on {hello.host[:64]!r}, but {who} "
            f"checked in as rank {hello.rank} first; it keeps the number")


def challenge(token: str, hello: Hello, launcher_nonce: str) -> bytes:
    """The launcher's first line to a rank: its nonce and its proof for the rank's."""
    return encode("challenge", nonce=launcher_nonce,
                  proof=launcher_proof(token, hello.nonce, launcher_nonce, hello.who))


def authentic(token: str, hello: Hello, launcher_nonce: str, msg: dict[str, Any]) -> bool:
    """The rank's ``auth`` proves the token for both nonces of this connection and for the
    identity its hello arrived with."""
    return msg.get("t") == "auth" and same(
        msg.get("proof"), rank_proof(token, hello.nonce, launcher_nonce, hello.who))
