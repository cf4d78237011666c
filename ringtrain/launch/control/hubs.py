"""The launcher's reading of a host's hub (rank/hub.py, ``--control-hubs``). PURE.

A hub checks in as a rank does (hello, challenge, auth) with ``role: hub`` and no rank; then
its sealed messages speak for the ranks that checked in with it, each by the hub's number for
its connection (``c``): ``join`` (a rank's identity, checked field by field as a hello is),
``ev`` (one rank message), ``beat`` (each rank's age, the step times since the last beat),
``left`` (a rank's connection ended) and ``note`` (the hub's own word, for the log). Anything
else, or a field of the wrong type, is dropped. ``HubLink`` is what the launcher keeps of one
hub: its host and which rank each of its connections speaks for; a hub speaks only for ranks
of its own host (its hello's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ringtrain.launch.control.hello import Hello, read_hello
from ringtrain.rank.events import HUB_ROLE, RANK_EVENTS, count, identity, number

Steps = dict[str, Any]
HUB_KINDS = frozenset({"join", "ev", "beat", "left", "note"})
MAX_NOTE = 300


@dataclass
class HubLink:
    host: str
    slots: dict[int, int] = field(default_factory=dict)  # the hub's c -> the rank it speaks for


def is_hub(msg: dict[str, Any]) -> bool:
    return msg.get("role") == HUB_ROLE


def read_hub_hello(msg: dict[str, Any]) -> Hello | str:
    """A hub's hello: a rank's without the rank (checked as one, rank -1)."""
    if "rank" in msg:
        return "a hub's hello naming a rank"
    hello = read_hello({**msg, "rank": 0})
    if isinstance(hello, str):
        return hello.replace("rank 0 on", "the hub on")
    return Hello(-1, hello.host, hello.pid, hello.nonce, hello.start, who=identity(msg))


def read_join(msg: dict[str, Any], hub_host: str) -> tuple[int, Hello] | str:
    """``join``: the hub's number for the connection and the rank's identity, or why not."""
    c, fields = slot(msg), msg.get("hello")
    if c is None or not isinstance(fields, dict):
        return "a join without its connection or identity"
    # the rank's own proto: a rank of another release is refused by name, with the fix
    hello = read_hello({"proto": None, **fields, "t": "hello", "nonce": "0" * 32})
    if isinstance(hello, str):
        return hello
    if hello.host != hub_host:
        return (f"a hub on {hub_host[:64]!r} spoke for rank {hello.rank} on "
                f"{hello.host[:64]!r}: a hub speaks for its own host's ranks only")
    return c, hello


def slot(msg: dict[str, Any]) -> int | None:
    return count(msg.get("c"))


def read_event(msg: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """``ev``: (c, the rank's message as it said it), or None."""
    c, kind, fields = slot(msg), msg.get("k"), msg.get("f")
    if c is None or kind not in RANK_EVENTS or not isinstance(fields, dict):
        return None
    return c, {**fields, "t": kind}


def read_beat(msg: dict[str, Any]) -> tuple[list[tuple[int, float]], list[tuple[int, Steps]]]:
    """``beat``: [(c, seconds since the hub last heard that rank)], [(c, a steps message)];
    malformed entries left out."""
    ages: list[tuple[int, float]] = []
    for item in _pairs(msg.get("a")):
        c, age = count(item[0]), number(item[1])
        if c is not None and age is not None and age >= 0:
            ages.append((c, age))
    steps = [(c, {**item[1], "t": "steps"}) for item in _pairs(msg.get("s"))
             if (c := count(item[0])) is not None and isinstance(item[1], dict)]
    return ages, steps


def _pairs(value: Any) -> list[list[Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, list) and len(v) == 2]


def note(msg: dict[str, Any]) -> str:
    text = msg.get("text")
    return str(text)[:MAX_NOTE] if isinstance(text, str) else ""
