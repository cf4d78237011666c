"""A fault campaign's figures from rank 0's step lines and the faults' times. PURE.

Rank 0 prints ``STEP <wall time> <global step> <world size>`` after every batch
(``recovery.RECOVERY_SCRIPT``). A *disruption* is a pair of consecutive lines where training
went back (the step did not grow: a rollback to a commit or a checkpoint), the world changed
size, or the gap is longer than ``gap_limit`` (a stall). Each fault is answered by the first
disruption after it: TTTA is from the fault to the first batch after that disruption, steps lost
are the batches trained again. A disruption where the world only grew (a host back, a spare
in) is a *join*: counted apart, never taken as a fault's answer.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from ringtrain.bench.launcher.recovery import Step


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # wall clock
    kind: str  # kill, link, stall
    host: str


@dataclass(frozen=True, slots=True)
class Incident:
    fault: Fault
    ttta_s: float | None  # None: no disruption seen before the job ended
    lost: int  # batches trained again
    size_after: int  # world size of the first batch after the disruption
    whole_s: float | None = None  # from the fault to a batch of the full world again


@dataclass(frozen=True, slots=True)
class Summary:
    mode: str
    incidents: tuple[Incident, ...]
    joins: int
    ettr: float | None
    accuracy: float | None
    exit_code: int | None  # None: the job did not end (a hang)
    wall_s: float
    steps: int  # the highest global step reached

    def ttta(self, kind: str | None = None) -> list[float]:
        return [i.ttta_s for i in self.incidents
                if i.ttta_s is not None and (kind is None or i.fault.kind == kind)]


def step_gap(steps: list[Step]) -> float | None:
    """The median time between consecutive batches of one world: the steady batch time."""
    gaps = [b.at - a.at for a, b in itertools.pairwise(steps)
            if b.step == a.step + 1 and b.size == a.size]
    return statistics.median(gaps) if gaps else None


def disrupted(a: Step, b: Step, gap_limit: float) -> bool:
    return b.step <= a.step or b.size != a.size or b.at - a.at > gap_limit


def is_join(a: Step, b: Step) -> bool:
    return b.size > a.size and b.step > a.step


def incidents(steps: list[Step], faults: list[Fault], gap_limit: float) -> tuple[
        tuple[Incident, ...], int]:
    """Each fault's answer, and the number of joins. A disruption answers at most one fault;
    the search for a fault's answer starts at the fault or after the previous answer."""
    pairs = list(itertools.pairwise(sorted(steps, key=lambda s: s.at)))
    marks = [(a, b) for a, b in pairs if disrupted(a, b, gap_limit)]
    joins = [(a, b) for a, b in marks if is_join(a, b)]
    answers = [(a, b) for a, b in marks if not is_join(a, b)]
    full = max((s.size for s in steps), default=0)
    out, used = [], 0.0
    for fault in sorted(faults, key=lambda f: f.at):
        found = next(((a, b) for a, b in answers if b.at > max(fault.at, used)), None)
        if found is None:
            out.append(Incident(fault, None, 0, 0))
            continue
        a, b = found
        used = b.at
        whole = next((s.at - fault.at for s in steps if s.at >= b.at and s.size == full), None)
        out.append(Incident(fault, b.at - fault.at, max(0, a.step - (b.step - 1)), b.size,
                            whole))
    return tuple(out), len(joins)


def ettr(steps: list[Step], total_steps: int, wall_s: float) -> float | None:
    """Effective training time ratio (arXiv 2410.21680): the batches the job got through (at
    most the ones it needed; fewer when it failed) at the steady batch time, over the wall time
    from launch to end."""
    gap = step_gap(steps)
    reached = min(total_steps, max((s.step for s in steps), default=0))
    return None if gap is None or wall_s <= 0 else min(1.0, reached * gap / wall_s)


def summarise(mode: str, steps: list[Step], faults: list[Fault], *, total_steps: int,
              wall_s: float, accuracy: float | None, exit_code: int | None) -> Summary:
    gap = step_gap(steps) or 0.0
    found, joins = incidents(steps, faults, gap_limit=max(1.0, 5 * gap))
    return Summary(mode, found, joins, ettr(steps, total_steps, wall_s), accuracy, exit_code,
                   wall_s, max((s.step for s in steps), default=0))


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f}" if values else f"{'-':>6s}"


HEADER = (f"{'mode':10s} {'faults':>6s} {'kill':>6s} {'link':>6s} {'stall':>6s} "
          f"{'whole':>6s} {'lost max':>8s} {'joins':>5s} {'ETTR':>5s} {'accuracy':>8s} "
          f"{'wall s':>7s} {'exit':>5s}")


def row(s: Summary) -> str:
    lost = max((i.lost for i in s.incidents), default=0)
    unanswered = sum(i.ttta_s is None for i in s.incidents)
    exit_code = "hang" if s.exit_code is None else str(s.exit_code)
    whole = [i.whole_s for i in s.incidents if i.whole_s is not None and i.fault.kind != "stall"]
    return (f"{s.mode:10s} {len(s.incidents):6d} {_median(s.ttta('kill'))} "
            f"{_median(s.ttta('link'))} {_median(s.ttta('stall'))} {_median(whole)} "
            f"{lost:8d} {s.joins:5d} "
            f"{'-' if s.ettr is None else format(s.ettr, '5.2f'):>5s} "
            f"{'-' if s.accuracy is None else format(s.accuracy, '8.3f'):>8s} "
            f"{s.wall_s:7.0f} {exit_code:>5s}"
            + (f"  ({unanswered} faults with no answer seen)" if unanswered else ""))


def as_json(s: Summary) -> dict[str, object]:
    return {"mode": s.mode, "ettr": s.ettr, "accuracy": s.accuracy, "exit_code": s.exit_code,
            "wall_s": s.wall_s, "steps": s.steps, "joins": s.joins,
            "incidents": [{"at": i.fault.at, "kind": i.fault.kind, "host": i.fault.host,
                           "ttta_s": i.ttta_s, "lost": i.lost, "size_after": i.size_after,
                           "whole_s": i.whole_s}
                          for i in s.incidents]}
