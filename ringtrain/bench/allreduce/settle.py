"""When a benchmark's warm-up is over: the times have stopped falling. Pure.

A fixed warm-up count is too short for some implementations and wasted on others: Horovod's
first all-reduces of a 64 MiB buffer on the simulated cluster took 4x its steady time for
several iterations (first touch of its fusion buffer and of TensorFlow's output tensors,
the response cache filling), so with ``--reps 3 --warmup 1`` its median was 4x its best while
mpi4py's, with preallocated buffers, was steady at once. Warming up until the times settle
measures every implementation in its steady state whatever ``--reps`` says, and the warm-up's
own cost is reported apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

WINDOW = 3  # iterations compared window against window
TOLERANCE = 0.1  # a window at most 10% faster than the one before: no longer improving
MAX_ITERATIONS = 64
MAX_SECONDS = 20.0


def settled(times: Sequence[float], minimum: int = 1, window: int = WINDOW,
            tolerance: float = TOLERANCE) -> bool:
    """Whether warm-up can stop after ``times`` (every iteration so far, seconds): at least
    ``minimum`` iterations, and the median of the last ``window`` no more than ``tolerance``
    below the median of the ``window`` before it and not above its own window's best by more
    than the tolerance either. Also true past ``MAX_ITERATIONS`` or ``MAX_SECONDS`` in all, so
    a noisy machine cannot stall a run. Every rank must see the same ``times`` (the slowest
    rank's, say) to stop together."""
    n = len(times)
    if n < minimum:
        return False
    if n >= MAX_ITERATIONS or sum(times) >= MAX_SECONDS:
        return True
    if n < 2 * window:
        return False
    last, before = times[-window:], times[-2 * window:-window]
    recent, previous = statistics.median(last), statistics.median(before)
    return recent >= (1 - tolerance) * previous and recent <= (1 + tolerance) * min(last)


def summary(times: Sequence[float]) -> dict[str, float | int]:
    """The warm-up's cost, reported beside the timed iterations."""
    if not times:
        return {"iterations": 0, "seconds": 0.0, "first_s": 0.0, "last_s": 0.0}
    return {"iterations": len(times), "seconds": float(sum(times)), "first_s": float(times[0]),
            "last_s": float(statistics.median(times[-WINDOW:]))}
