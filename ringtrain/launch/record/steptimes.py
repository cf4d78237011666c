"""A rank's step times as the control server keeps them (straggler detection reads them).
PURE."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StepTimes:
    """A rank's step times: the latest window's mean compute (its own part of a step, before
    the all-reduce) and whole step in seconds, when it came, and running totals of compute
    seconds and steps measured (a reader that skips windows still gets exact means)."""

    compute: float | None
    wall: float | None
    at: float
    total_compute: float = 0.0
    total_steps: int = 0
    total_wall: float = 0.0  # whole-step seconds, over the steps that reported one
    wall_steps: int = 0

    def then(self, msg: dict[str, Any], now: float) -> StepTimes:
        compute, wall = _seconds(msg.get("compute")), _seconds(msg.get("wall"))
        n = msg.get("n")
        n = n if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1_000_000 else 1
        if compute is None:
            return StepTimes(None, wall, now, self.total_compute, self.total_steps,
                             self.total_wall, self.wall_steps)
        walls = (self.total_wall + wall * n, self.wall_steps + n) if wall is not None else (
            self.total_wall, self.wall_steps)
        return StepTimes(
            compute, wall, now, self.total_compute + compute * n, self.total_steps + n, *walls
        )


def _seconds(value: Any) -> float | None:
    """A finite number of seconds >= 0 (the JSON reader takes Infinity and NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
