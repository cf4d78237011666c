"""A fault campaign's figures from rank 0's step lines and the faults' times. PURE.

Rank 0 prints ``STEP <wall time> <global step> <world size>`` after every batch
(``campaign_task.CAMPAIGN_SCRIPT``). A *disruption* is a pair of consecutive lines where
training went back (the step did not grow: a rollback to a commit or a checkpoint), the world
changed size, or the gap is longer than ``gap_limit`` (a stall).

One accounting of the wall time, from which every figure comes:

* ``gap`` is the steady batch time (the median gap between consecutive batches of one world);
  ``H(t)`` the high-water mark, the highest step reached by ``t``. An interval
  ``(u, v]`` earns ``gap x (H(v) - H(u))`` and loses the rest of its length: a batch trained
  again earns nothing, a batch faster than the median earns more than its time.
* A disruption belongs to the latest fault that came at most ``gap_limit`` before it began (the
  job was training when that fault landed); one that began earlier is no fault's (start-up).
* A fault's window runs from the fault to *training again at the rate before it*: the first
  batch past the high-water mark of its last disruption (every batch it cost trained again,
  every re-form it caused, a host back included, over). A fault with no disruption of its own
  has an empty window, unless no batch came after it; a job that failed or hung stopped at its
  last batch, a disruption of the fault before it that is never over (the window runs to the
  end).
* Each moment of the wall time is lost to one bucket only: the latest fault whose window
  covers it (so when faults overlap, the time counts once, for the later fault), else start-up
  (launch to the first batch), else the end (the last batch to the job's end: evaluation and
  exit), else "other" (steady training's spread around the median batch time).

So the buckets add up to ``wall - gap x H(end)`` by construction, and
``ETTR = gap x H(end) / wall = 1 - sum(buckets) / wall`` (arXiv 2410.21680).
"""

from __future__ import annotations

import bisect
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
    ttta_s: float | None  # to the first batch after its first disruption; None: it had none
    lost: int  # batches trained again
    size_after: int  # world size of the first batch after its first disruption
    whole_s: float | None = None  # from the fault to a batch of the full world again
    back_s: float | None = None  # its window: to training again at the rate before, its
    # last disruption (a host back, say) included; None: never back
    lost_s: float = 0.0  # the wall time lost to it (its bucket)
    amid: bool = False  # it landed while the job was not training (in a pause that began
    # before it: a re-form, a restore, a stall), the moment a fault is hardest to absorb


@dataclass(frozen=True, slots=True)
class Ledger:
    """Where the wall time went; ``faults_s + startup_s + end_s + other_s`` equals
    ``wall_s - productive_s`` (to rounding)."""

    wall_s: float
    productive_s: float  # gap x the highest step reached
    faults_s: float
    startup_s: float
    end_s: float
    other_s: float

    @property
    def ettr(self) -> float | None:
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    @property
    def lost_s(self) -> float:
        return self.faults_s + self.startup_s + self.end_s + self.other_s


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
    ledger: Ledger | None = None
    interval: float | None = None  # seconds between faults; None: no faults (clean)
    launched: float = 0.0  # wall clock

    def ttta(self, kind: str | None = None) -> list[float]:
        return [i.ttta_s for i in self.incidents
                if i.ttta_s is not None and (kind is None or i.fault.kind == kind)]

    def lost(self, kind: str) -> list[float]:
        return [i.lost_s for i in self.incidents if i.fault.kind == kind]


def step_gap(steps: list[Step]) -> float | None:
    """The median time between consecutive batches of one world: the steady batch time."""
    gaps = [b.at - a.at for a, b in itertools.pairwise(steps)
            if b.step == a.step + 1 and b.size == a.size]
    return statistics.median(gaps) if gaps else None


def disrupted(a: Step, b: Step, gap_limit: float) -> bool:
    return b.step <= a.step or b.size != a.size or b.at - a.at > gap_limit


def is_join(a: Step, b: Step) -> bool:
    return b.size > a.size and b.step > a.step


class HighWater:
    """H(t): the highest step among the batches up to ``t`` (0 before the first)."""

    def __init__(self, steps: list[Step]) -> None:
        self.times = [s.at for s in steps]
        self.marks = list(itertools.accumulate((s.step for s in steps), max))

    def __call__(self, t: float) -> int:
        n = bisect.bisect_right(self.times, t)
        return self.marks[n - 1] if n else 0


def _windows(steps: list[Step], faults: list[Fault], gap_limit: float, ended: float,
             failed: bool) -> list[tuple[Fault, list[tuple[Step, Step]], float]]:
    """Each fault, its own disruptions, and the end of its window (the wall clock). A job
    that ``failed`` (or hung) stopped at its last batch: a disruption with no batch after it,
    its fault's like any other, never over."""
    marks = [(a, b) for a, b in itertools.pairwise(steps) if disrupted(a, b, gap_limit)]
    starts = [f.at - gap_limit for f in faults]
    high = HighWater(steps)
    out = []
    for k, fault in enumerate(faults):
        until = starts[k + 1] if k + 1 < len(faults) else float("inf")
        own = [(a, b) for a, b in marks if starts[k] <= a.at < until and b.at > fault.at]
        back = fault.at if steps and steps[-1].at > fault.at else ended  # no batch after it
        if own:
            a, b = own[-1]
            mark = max(high(a.at), a.step)
            back = next((s.at for s in steps if s.at >= b.at and s.step > mark), ended)
        if failed and steps and starts[k] <= steps[-1].at < until:
            back = ended
        out.append((fault, own, back))
    return out


def account(steps: list[Step], faults: list[Fault], *, launched: float, ended: float,
            gap_limit: float, failed: bool = False) -> tuple[tuple[Incident, ...], int, Ledger]:
    """Each fault's figures, the number of joins (the world grew back, not a fault's first
    answer), and the ledger of the wall time from ``launched`` to ``ended``; ``failed``: the
    job did not end with status 0 (the time after its last batch is not the end's)."""
    steps = sorted(steps, key=lambda s: s.at)
    faults = sorted(faults, key=lambda f: f.at)
    gap = step_gap(steps) or 0.0
    high = HighWater(steps)
    joins = sum(is_join(a, b) and disrupted(a, b, gap_limit)
                for a, b in itertools.pairwise(steps))
    windows = _windows(steps, faults, gap_limit, ended, failed)
    first = steps[0].at if steps else ended
    last = steps[-1].at if steps else ended
    cuts = sorted({min(max(t, launched), ended) for t in (
        launched, ended, first, last, *(f.at for f, _, _ in windows),
        *(back for _, _, back in windows))})
    lost = [0.0] * len(windows)
    startup = end = other = 0.0
    for u, v in itertools.pairwise(cuts):
        here = (v - u) - gap * (high(v) - high(u))
        owner = next((k for k in range(len(windows) - 1, -1, -1)
                      if windows[k][0].at <= u and windows[k][2] >= v), None)
        if owner is not None:
            lost[owner] += here
        elif v <= first:
            startup += here
        elif u >= last:
            end += here
        else:
            other += here
    full = max((s.size for s in steps), default=0)
    pauses = [(a.at, b.at) for a, b in itertools.pairwise(steps) if disrupted(a, b, gap_limit)]
    incidents = []
    for (fault, own, back), lost_s in zip(windows, lost, strict=True):
        # a pause that began more than gap_limit before the fault is not the fault's own
        amid = any(u < fault.at - gap_limit and fault.at < v for u, v in pauses)
        if not own:
            incidents.append(Incident(fault, None, 0, 0, None,
                                      None if back >= ended else 0.0, lost_s, amid))
            continue
        b = own[0][1]
        whole = next((s.at - fault.at for s in steps if s.at >= b.at and s.size == full), None)
        redone = sum(max(0, x.step - (y.step - 1)) for x, y in own)
        incidents.append(Incident(fault, b.at - fault.at, redone, b.size, whole,
                                  None if back >= ended else back - fault.at, lost_s, amid))
    productive = gap * (high(ended) - high(launched))
    ledger = Ledger(ended - launched, productive, sum(lost), startup, end, other)
    return tuple(incidents), joins, ledger


def incidents(steps: list[Step], faults: list[Fault], gap_limit: float) -> tuple[
        tuple[Incident, ...], int]:
    """Each fault's figures and the joins, over the steps' own span."""
    ordered = sorted(steps, key=lambda s: s.at)
    span = (ordered[0].at, ordered[-1].at + 1.0) if ordered else (0.0, 1.0)
    found, joins, _ = account(ordered, faults, launched=span[0], ended=span[1],
                              gap_limit=gap_limit)
    return found, joins


def ettr(steps: list[Step], total_steps: int, wall_s: float) -> float | None:
    """Effective training time ratio (arXiv 2410.21680): the batches the job got through (at
    most the ones it needed; fewer when it failed) at the steady batch time, over the wall time
    from launch to end."""
    gap = step_gap(steps)
    reached = min(total_steps, max((s.step for s in steps), default=0))
    return None if gap is None or wall_s <= 0 else min(1.0, reached * gap / wall_s)


def summarise(mode: str, steps: list[Step], faults: list[Fault], *, launched: float,
              ended: float, accuracy: float | None, exit_code: int | None,
              interval: float | None = None) -> Summary:
    gap = step_gap(steps) or 0.0
    found, joins, ledger = account(steps, faults, launched=launched, ended=ended,
                                   gap_limit=max(1.0, 5 * gap), failed=exit_code != 0)
    return Summary(mode, found, joins, ledger.ettr if gap else None, accuracy, exit_code,
                   ended - launched, max((s.step for s in steps), default=0), ledger, interval,
                   launched)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f}" if values else f"{'-':>6s}"


HEADER = (f"{'mode':10s} {'faults':>6s} {'TTTA kill/link/stall':>20s} "
          f"{'lost kill/link/stall':>20s} {'faults s':>8s} {'start/end':>9s} {'other':>6s} "
          f"{'wall s':>7s} {'ETTR':>5s} "
          f"{'accuracy':>8s} {'vs clean':>8s} {'exit':>5s}")


def row(s: Summary, clean: float | None = None) -> str:
    """One mode's line: median TTTA and median time lost per fault by kind, the ledger's
    buckets (they add up to wall x (1 - ETTR)), accuracy and its difference from
    the fault-free run's ``clean`` in points."""
    led = s.ledger or Ledger(s.wall_s, 0.0, 0.0, 0.0, 0.0, 0.0)
    unanswered = sum(i.ttta_s is None and i.back_s is not None for i in s.incidents)
    never = sum(i.back_s is None for i in s.incidents)
    amid = sum(i.amid for i in s.incidents)
    exit_code = "hang" if s.exit_code is None else str(s.exit_code)
    delta = (f"{100 * (s.accuracy - clean):+8.1f}"
             if s.accuracy is not None and clean is not None else f"{'-':>8s}")
    notes = [f"{unanswered} faults with no disruption of their own"] if unanswered else []
    notes += [f"{never} faults never followed by training again"] if never else []
    notes += [f"{amid} landed while it was not training (a re-form, a restore)"] if amid else []
    return (f"{s.mode:10s} {len(s.incidents):6d} "
            + " ".join(_median(s.ttta(k)) for k in ("kill", "link", "stall")) + " "
            + " ".join(_median(s.lost(k)) for k in ("kill", "link", "stall"))
            + f" {led.faults_s:8.1f} "
            f"{led.startup_s + led.end_s:9.1f} {led.other_s:6.1f} {s.wall_s:7.0f} "
            f"{'-' if s.ettr is None else format(s.ettr, '5.2f'):>5s} "
            f"{'-' if s.accuracy is None else format(s.accuracy, '8.3f'):>8s} {delta} "
            f"{exit_code:>5s}" + (f"  ({'; '.join(notes)})" if notes else ""))


def report(summaries: list[Summary]) -> list[str]:
    """One table per rate: its modes, then the fault-free run's line (the reference of the
    accuracy column: its own is 0 by definition)."""
    clean = next((s for s in summaries if s.interval is None), None)
    reference = clean.accuracy if clean is not None else None
    out: list[str] = []
    for interval in sorted({s.interval for s in summaries if s.interval is not None},
                           reverse=True):
        out += ["", f"one fault every {interval:g} s", HEADER]
        out += [row(s, reference) for s in summaries if s.interval == interval]
        out += [row(clean, reference)] if clean is not None else []
    if not out and clean is not None:
        out = ["", HEADER, row(clean, reference)]
    return out


def as_json(s: Summary) -> dict[str, object]:
    led = s.ledger
    return {"mode": s.mode, "interval": s.interval, "launched": s.launched, "ettr": s.ettr,
            "accuracy": s.accuracy, "exit_code": s.exit_code, "wall_s": s.wall_s,
            "steps": s.steps, "joins": s.joins,
            "ledger": None if led is None else {
                "wall_s": led.wall_s, "productive_s": led.productive_s,
                "faults_s": led.faults_s, "startup_s": led.startup_s, "end_s": led.end_s,
                "other_s": led.other_s},
            "incidents": [{"at": i.fault.at, "kind": i.fault.kind, "host": i.fault.host,
                           "ttta_s": i.ttta_s, "back_s": i.back_s, "lost_s": i.lost_s,
                           "lost": i.lost, "size_after": i.size_after, "whole_s": i.whole_s,
                           "amid": i.amid}
                          for i in s.incidents]}
