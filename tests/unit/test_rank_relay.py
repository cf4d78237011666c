"""The relay from a rank entry's child program (--exec) to the entry's connection: the child
reports, the entry numbers and seals (issue 40 item 4)."""

from __future__ import annotations

import json
import os

from ringtrain.rank.events import Seal, session_key
from ringtrain.rank.relay import RelaySender, forward

KEY = session_key("t" * 32, "a" * 32, "b" * 32)


def test_a_seal_numbers_its_messages_whatever_the_fields_say() -> None:
    seal, opened = Seal(KEY, "rank"), Seal(KEY, "rank")
    first = seal.seal("progress", seq=2**62, t="done", step=1)
    body = json.loads(first.split(b"\t")[0])
    assert (body["t"], body["seq"], body["step"]) == ("progress", 1, 1)
    assert opened.open(first) is not None and opened.open(seal.seal("hb")) is not None


def test_a_relayed_child_cannot_set_its_ranks_sequence_numbers() -> None:
    """Issue 40: a child that wrote ``seq`` set its rank's number: the launcher then dropped
    every message the entry sealed after it (heartbeats too) as replays, and the rank went
    silent. Now the entry assigns every number; each message reaches the launcher."""
    seal, launcher = Seal(KEY, "rank"), Seal(KEY, "rank")
    sent: list[bytes] = []
    read_fd, write_fd = os.pipe()
    pump = forward(read_fd, lambda kind, **fields: sent.append(seal.seal(kind, **fields)))
    child = RelaySender(write_fd)
    child.send("progress", seq=2**62, rank=7, step=3)
    child.send("done", seq=2**62 + 1)
    child._stream.close()  # type: ignore[union-attr]
    pump.join(5)
    sent.append(seal.seal("hb"))  # the entry's own heartbeat after them
    heard = [launcher.open(line) for line in sent]
    assert [m["t"] if m else None for m in heard] == ["progress", "done", "hb"]
    assert [m["seq"] for m in heard if m] == [1, 2, 3]
    assert heard[0] is not None and "rank" not in heard[0] and heard[0]["step"] == 3
