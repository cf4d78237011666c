"""What a training script tells the launcher: ``ringtrain.rank.progress.report(...)``.

Safe to call from any script: without a supervising launcher it does nothing. ringtrain's
launcher shows the latest progress live and uses it to detect a stalled job (no progress within
``--stall-timeout``). ``ringtrain.keras`` calls it from its Keras callbacks and ``save``,
and re-exports it as ``ringtrain.keras.progress``.
"""

from __future__ import annotations

import math

from ringtrain.rank import agent as rankagent


def report(
    *,
    epoch: int | None = None,
    step: int | None = None,
    loss: float | None = None,
    samples_per_s: float | None = None,
    epochs: int | None = None,
    steps: int | None = None,
) -> None:
    agent = rankagent.agent()
    if agent is None:
        return
    fields = {
        "epoch": epoch,
        "step": step,
        "epochs": epochs,
        "steps": steps,
        "loss": None if loss is None or not math.isfinite(loss) else float(loss),
        "samples_per_s": None if samples_per_s is None else round(float(samples_per_s), 2),
    }
    agent.send("progress", **{k: v for k, v in fields.items() if v is not None})
