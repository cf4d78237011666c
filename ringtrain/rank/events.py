"""The rank <-> launcher control protocol: newline-delimited JSON messages. Pure.

Ranks connect to ``RINGTRAIN_CONTROL_ADDR`` (host:port) and first send ``hello`` carrying
``RINGTRAIN_CONTROL_TOKEN``; a connection without the token is dropped. Messages, rank -> launcher:

* ``hello``    rank, host, pid, ppid, parent (the parent's command name, e.g. ``orted``)
* ``init``     Horovod finished ``hvd.init()``: rank, size, local_rank
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

and launcher -> rank: ``hb`` every ``HEARTBEAT_S``; ``stop`` (a fault: the rank ends itself and
its daemon); ``finish`` (tf-ps: the chief is done; a serving task says ``done`` and exits 0);
``preempt`` (SIGUSR1 reached the launcher: rank 0 commits a checkpoint at its next batch end). A
rank that hears nothing from the launcher for its ``RINGTRAIN_LAUNCHER_TIMEOUT`` ends itself and
its Open MPI daemon (a dead-man switch), so a partitioned host cannot keep the job's processes
alive after the launcher gave up on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

HEARTBEAT_S = 1.0
MAX_LINE = 64 * 1024


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
# failed rank whose log has it (launch/run.py), as it does one with a traceback
ERROR_MARK = "ringtrain: error:"


def encode(kind: str, **fields: Any) -> bytes:
    return (json.dumps({"t": kind, **fields}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any] | None:
    """One message, or None when the line is not a JSON object with a string ``t``."""
    if len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        return None
    return data


def to_event(data: dict[str, Any], rank: int) -> RankEvent:
    fields = tuple(sorted((k, v) for k, v in data.items() if k not in ("t", "token")))
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
