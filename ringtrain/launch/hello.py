"""The launcher's side of a rank's check-in (the handshake in rank/events.py). PURE.

``read_hello`` checks every field of a ``hello`` (a field of the wrong type refuses the
connection, never reaches the server's state); ``challenge`` is the launcher's answer, proving
it holds the job's token for this hello's nonce; ``authentic`` checks the rank's ``auth``
against both nonces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringtrain.rank.events import (
    PROTOCOL,
    count,
    encode,
    is_nonce,
    launcher_proof,
    rank_proof,
    same,
)
from ringtrain.version import __version__

MAX_NAME = 255


@dataclass(frozen=True, slots=True)
class Hello:
    """What a rank said of itself, its fields checked; ``nonce`` is its fresh random hex."""

    rank: int
    host: str
    pid: int
    nonce: str
    start: int | None = None
    ppid: int | None = None
    parent: str = ""
    parent_start: int | None = None


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
    )


def challenge(token: str, hello: Hello, launcher_nonce: str) -> bytes:
    """The launcher's first line to a rank: its nonce and its proof for the rank's."""
    return encode("challenge", nonce=launcher_nonce,
                  proof=launcher_proof(token, hello.nonce, launcher_nonce))


def authentic(token: str, hello: Hello, launcher_nonce: str, msg: dict[str, Any]) -> bool:
    """The rank's ``auth`` proves the token for both nonces of this connection."""
    return msg.get("t") == "auth" and same(
        msg.get("proof"), rank_proof(token, hello.nonce, launcher_nonce))
