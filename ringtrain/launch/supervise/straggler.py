"""Stragglers during training: which rank keeps the others waiting. Pure.

Every rank sends, about once a second, the mean of its own part of a step: from the step's
start until its gradients are ready for the all-reduce (``ringtrain.keras.steps``). In a
synchronous job the whole step is as long on every rank; this part is not: the straggler's is
long, the others wait inside the all-reduce. The control server keeps each rank's running
totals; the watch keeps, per rank, the totals it saw over the last ``window_s`` and so the
rank's mean over that window (exact, however many windows a slow tick skipped). Each rank gets
two scores from those means:

* ``vs_median``: its mean over the median of the *other* ranks' means (leave-one-out: with two
  ranks the slow one is compared with the fast one, not with their mean);
* ``vs_best``: its mean over its own best window-long mean so far (slowed down, or always slow).

A rank is named once a full window's mean reaches ``threshold`` x the others' median, and
cleared once a full window's mean is under it. Per-second numbers are noisy (measured on this
2-core machine, healthy ranks: single seconds up to 2.2x; a rank at a 20% CPU quota: single
seconds from 0.5x to 14x, because a throttled period lands in one step or in the all-reduce);
the window's mean is not. A rank that stopped reporting for ``FRESH_S`` (an epoch's
checkpoint, the end) is neither scored nor compared with. The leave-one-out medians come from
one sorted list: a tick costs O(ranks log ranks), not O(ranks^2).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.result import FailureKind, Straggler
from ringtrain.launch.record.snapshot import RankState, Snapshot
from ringtrain.spec import StragglerAction, StragglerPolicy

FRESH_S = 5.0
SCORE_EVERY_S = 1.0
# A rank is a straggler only when its lag costs the job this share of a whole step: a rank at
# 9.9 ms against a 5.1 ms median is 1.9x, yet where every step takes a second (the job waits
# on storage, the input pipeline, a slow all-reduce) its lag is noise (issue 38 item 6)
MIN_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class RankScore:
    rank: int
    host: str
    compute_s: float  # the rank's mean over the window
    others_median_s: float
    vs_median: float
    vs_best: float | None
    share: float | None = None  # its lag over the job's whole step (the ranks' median)

    @property
    def slow(self) -> bool:
        """Over the threshold, and its lag a measurable share of the job's step."""
        return self.share is None or self.share >= MIN_SHARE


def leave_one_out_median(values: list[float], value: float) -> float:
    """The median of sorted ``values`` without one occurrence of ``value`` (len >= 2)."""
    i = bisect.bisect_left(values, value)

    def at(k: int) -> float:  # the k-th of the values without index i
        return values[k] if k < i else values[k + 1]

    m = len(values) - 1
    if m % 2:
        return at(m // 2)
    return (at(m // 2 - 1) + at(m // 2)) / 2


@dataclass
class _Track:
    # at, then the totals: compute, steps, whole-step seconds, steps with a whole step
    samples: deque[tuple[float, float, int, float, int]] = field(default_factory=deque)
    best: float | None = None  # the lowest window-long mean seen
    named: Straggler | None = None


class StragglerWatch:
    """Fed every supervision tick's snapshot; says who became a straggler and who caught up.
    ``found`` keeps everyone named in this attempt (for result.json), cleared or not."""

    def __init__(self, policy: StragglerPolicy, where: Mapping[int, str]) -> None:
        self.policy = policy
        self.where = where
        self._tracks: dict[int, _Track] = {}
        self._found: dict[int, Straggler] = {}
        self._scored_at: float | None = None

    @property
    def found(self) -> tuple[Straggler, ...]:
        return tuple(self._found[r] for r in sorted(self._found))

    def scores(self, snap: Snapshot) -> list[RankScore]:
        """Record the snapshot's totals; a score for every fresh rank with a full window,
        when at least two ranks have one."""
        means: dict[int, float] = {}
        walls: list[float] = []
        for r in snap.ranks:
            seen = self._window_mean(r, snap.now)
            if seen is not None:
                means[r.rank] = seen[0]
                walls += [seen[1]] if seen[1] is not None else []
        if len(means) < 2:
            return []
        values = sorted(means.values())
        step = sorted(walls)[len(walls) // 2] if walls else None  # the job's whole step
        out = []
        for rank, mean in means.items():
            track = self._tracks[rank]
            track.best = mean if track.best is None else min(track.best, mean)
            median = leave_one_out_median(values, mean)
            out.append(RankScore(
                rank=rank,
                host=self.where.get(rank, "?"),
                compute_s=mean,
                others_median_s=median,
                vs_median=mean / median if median > 0 else 1.0,
                vs_best=mean / track.best if track.best else None,
                share=(mean - median) / step if step else None,
            ))
        return out

    def _window_mean(self, r: RankState, now: float) -> tuple[float, float | None] | None:
        """The rank's mean compute over the window, and its mean whole step (None where it
        reported none)."""
        steps = r.steps
        if steps is None or not steps.total_steps or not r.connected or r.done:
            return None
        track = self._tracks.setdefault(r.rank, _Track())
        samples = track.samples
        if not samples or samples[-1][0] != steps.at:
            samples.append((steps.at, steps.total_compute, steps.total_steps, steps.total_wall,
                            steps.wall_steps))
        window = self.policy.window_s
        while len(samples) > 2 and samples[1][0] <= now - window:
            samples.popleft()  # keep one sample at or before the window's start
        if now - steps.at > FRESH_S:
            return None
        (t0, c0, n0, w0, m0), (t1, c1, n1, w1, m1) = samples[0], samples[-1]
        if t1 - t0 < window - 1.0 or n1 <= n0:  # a window's worth, give or take a report
            return None
        return (c1 - c0) / (n1 - n0), (w1 - w0) / (m1 - m0) if m1 > m0 else None

    def update(self, snap: Snapshot) -> tuple[list[Straggler], list[Straggler]]:
        """(newly named, newly cleared) after this snapshot. Ranks report once a second and
        ticks come five times as often: scoring is done at most once a second (at 8,000 ranks
        a scoring takes about 40 ms, which every tick would have paid)."""
        named: list[Straggler] = []
        cleared: list[Straggler] = []
        if self._scored_at is not None and snap.now - self._scored_at < SCORE_EVERY_S:
            return named, cleared
        self._scored_at = snap.now
        for s in self.scores(snap):
            track = self._tracks[s.rank]
            if s.vs_median >= self.policy.threshold and s.slow:
                if track.named is None:
                    track.named = _straggler(s, self.policy.window_s)
                    named.append(track.named)
                else:
                    track.named = replace(track.named, peak=max(track.named.peak, s.vs_median))
                self._found[s.rank] = track.named
            elif track.named is not None:
                done = replace(track.named, cleared=True)
                cleared.append(done)
                self._found[s.rank] = done
                track.named = None
        return named, cleared

    def tick(self, snap: Snapshot, note: Callable[[str], None]) -> Fault | None:
        """``update``, saying who was named or cleared; under restart-without the first
        rank named is a fault: the job restarts from its last checkpoint without that host."""
        named, cleared = self.update(snap)
        for s in named:
            note(f"straggler: {s.describe()}")
        for s in cleared:
            note(f"straggler cleared: {s.host}: rank {s.rank} back under "
                 f"{self.policy.threshold:.1f}x the median")
        if not named or self.policy.action is not StragglerAction.RESTART_WITHOUT:
            return None
        first = named[0]
        return Fault(
            FailureKind.STRAGGLER,
            f"rank {first.rank} on {first.host} is a straggler ({first.vs_median:.1f}x the "
            f"median for {first.seconds:.0f} s; --on-straggler restart-without)",
            tuple(sorted({s.host for s in named})),
            tuple(s.rank for s in named),
            snap.now,
        )


def _straggler(s: RankScore, window_s: float) -> Straggler:
    return Straggler(
        rank=s.rank,
        host=s.host,
        vs_median=s.vs_median,
        vs_best=s.vs_best,
        compute_s=s.compute_s,
        median_s=s.others_median_s,
        seconds=window_s,
        peak=s.vs_median,
    )
