"""What one message of a rank does to what the control server knows of it. PURE.

The same whether the rank spoke on its own connection or through its host's hub
(rank/hub.py): ``updated`` is the rank's new state, ``progress_of`` and ``restored_of`` read
rank 0's reports, a field of the wrong type left out, never trusted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ringtrain.launch.control.rounds import ring_of
from ringtrain.launch.record.snapshot import Progress, RankState, Restored
from ringtrain.launch.record.steptimes import StepTimes
from ringtrain.rank.events import count, number

ELASTIC_KEPT = 64  # resets and restores kept: a peer cannot grow them
_NO_STEPS = StepTimes(None, None, 0.0)


def updated(state: RankState, kind: str, msg: dict[str, Any], now: float) -> RankState:
    """``state`` after the rank said ``msg`` (of ``kind``) at ``now``."""
    return replace(
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
        steps=(state.steps or _NO_STEPS).then(msg, now) if kind == "steps" else state.steps,
    )


def progress_of(msg: dict[str, Any], now: float) -> Progress:
    return Progress(
        epoch=count(msg.get("epoch")),
        epochs=count(msg.get("epochs")),
        step=count(msg.get("step")),
        steps=count(msg.get("steps")),
        loss=number(msg.get("loss")),
        samples_per_s=number(msg.get("samples_per_s")),
        at=now,
    )


def restored_of(msg: dict[str, Any], now: float) -> Restored:
    return Restored(now, count(msg.get("source")), count(msg.get("epoch")),
                    count(msg.get("step")), count(msg.get("size")), count(msg.get("nbytes")))


def _api_parts(known: tuple[str, ...], msg: dict[str, Any]) -> tuple[str, ...]:
    parts = [k for k in ("checkpoint", "progress", "resume") if msg.get(k)]
    return tuple(sorted(set(known) | set(parts)))
