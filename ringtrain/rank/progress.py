"""What a training script tells the launcher: ``ringtrain.rank.progress.report(...)`` and
``step_time(...)``.

Safe to call from any script: without a supervising launcher they do nothing. ringtrain's
launcher shows the latest progress live and uses it to detect a stalled job (no progress within
``--stall-timeout``). ``ringtrain.keras`` calls ``report`` from its Keras callbacks and ``save``,
and re-exports it as ``ringtrain.keras.progress``.

``step_time(compute_s)``, on every rank, once per step: the seconds this rank spent on its own
part of the step (input, forward, backward) before it was ready for the all-reduce. In a
synchronous job every rank's whole step takes as long as the slowest rank's, so only this part
tells a straggler apart. The launcher names a rank whose part stays well above the others'
(``--on-straggler``). ``ringtrain.keras.callbacks()`` measures it for ``model.fit``; a custom
loop measures it itself, e.g. from the step's start until ``tape.gradient`` returned, before
Horovod's all-reduce.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

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


class StepWindow:
    """Per-step times gathered on the rank and sent as one ``steps`` message about every
    ``every_s``: the means of the window. Not the medians: a rank slowed by a CPU quota runs
    most steps at full speed and loses a whole throttled period in one step, which the median
    of its window hides (measured at a 20% quota: medians of 3-4 ms in most seconds, below
    the healthy ranks' 5-10 ms, while its 10 s means were 25-40 ms). One slow window, such as
    the traced first step, names nobody: the launcher compares means over a longer window."""

    def __init__(self, every_s: float = 1.0, clock: Any = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._sums = [0.0, 0.0]  # compute, wall seconds in this window
        self._counts = [0, 0]
        self._started = clock()
        self._lock = threading.Lock()

    def add(self, compute_s: float | None, wall_s: float | None = None) -> dict[str, Any] | None:
        """Record one step; the message due now (already sent when a launcher listens)."""
        with self._lock:
            for i, value in enumerate((compute_s, wall_s)):
                if value is not None and math.isfinite(value) and value >= 0:
                    self._sums[i] += value
                    self._counts[i] += 1
            now = self._clock()
            if now - self._started < self.every_s or not any(self._counts):
                return None
            # n: the steps the compute mean is over (the launcher keeps n x mean as a total)
            fields: dict[str, Any] = {"n": self._counts[0] or self._counts[1]}
            for i, key in enumerate(("compute", "wall")):
                if self._counts[i]:
                    fields[key] = round(self._sums[i] / self._counts[i], 6)
            self._sums, self._counts, self._started = [0.0, 0.0], [0, 0], now
        agent = rankagent.agent()
        if agent is not None:
            agent.send("steps", **fields)
        return fields


_WINDOW = StepWindow()


def step_time(compute_s: float, wall_s: float | None = None) -> None:
    """One step's own time on this rank (see the module's doc); call it on every rank."""
    _WINDOW.add(compute_s, wall_s)
