"""``bench recovery``'s stage table (issue 38 item 5): each reset split into its phases from the
launcher's ledger and the time to training again, their medians per world size, and each
phase's line fitted over the sizes and projected to larger worlds. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol


class Run(Protocol):
    """What the table reads of one run (recovery.Outcome)."""

    @property
    def ranks(self) -> int: ...
    @property
    def ttta_s(self) -> float | None: ...
    @property
    def stages(self) -> tuple[float | None, ...]: ...


PHASES = ("detect->reset", "re-form", "state sync", "first step")
PROJECT_TO = (512, 4096)


def phases(o: Run) -> tuple[float | None, ...]:
    """A run's reset split into PHASES from the ledger and the TTTA: the survivors' reset
    after the launcher named the loss, the ring formed again (Horovod's driver round, its
    rendezvous, the Gloo contexts), the state restored from a peer's memory, the first batch
    of the smaller world. Pure."""
    reset, formed, restore = (*o.stages, None, None, None)[:3]
    ttta = o.ttta_s

    def gap(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else b - a
    return (reset, gap(reset, formed), gap(formed, restore),
            None if ttta is None or restore is None else ttta - restore)


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares ``a + b * ranks`` through (ranks, seconds); None under two sizes. Pure."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = (sum((x - mx) * (y - my) for x, y in points)
         / sum((x - mx) ** 2 for x, _ in points))
    return my - b * mx, b


def stage_table(outcomes: Sequence[Run]) -> list[str]:
    """Per world size the median of each phase (ringtrain --elastic runs), then each phase's
    line fitted over the sizes and projected to PROJECT_TO ranks. Pure."""
    by_size: dict[int, list[tuple[float | None, ...]]] = {}
    for o in outcomes:
        if o.stages:
            by_size.setdefault(o.ranks, []).append(phases(o))
    if not by_size:
        return []
    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None
    medians = {size: [median([r[i] for r in rows]) for i in range(len(PHASES))]
               for size, rows in sorted(by_size.items())}
    head = f"{'ranks':>6s} " + " ".join(f"{p:>14s}" for p in PHASES) + f" {'total':>8s}"
    out = ["", "Each reset's phases, medians (seconds):", head]

    def line(label: str, values: list[float | None]) -> str:
        known = [v for v in values if v is not None]
        total = f"{sum(known):8.1f}" if len(known) == len(values) else f"{'-':>8s}"
        return f"{label:>6s} " + " ".join(
            f"{'-':>14s}" if v is None else f"{v:14.1f}" for v in values) + f" {total}"
    out += [line(str(size), vals) for size, vals in medians.items()]
    def points(i: int) -> list[tuple[int, float]]:
        return [(size, v) for size, vals in medians.items() if (v := vals[i]) is not None]
    fits = [fit_line(points(i)) for i in range(len(PHASES))]
    if all(f is None for f in fits):
        return out
    for at in PROJECT_TO:
        out.append(line(f"~{at}", [None if f is None else max(0.0, f[0] + f[1] * at)
                                   for f in fits]))
    out.append("(~N: each phase's least-squares line over the sizes measured, a + b x ranks. "
               "Here every rank shares this machine's cores, so a slope is contention as much "
               "as protocol: an upper bound for hosts that each run their own ranks.)")
    return out
