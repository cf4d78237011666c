"""Stragglers during training, the pure part: step-time totals on the control server's side,
the leave-one-out median, the watch naming and clearing a rank over a window, the fault under
restart-without, and what the rank's step window sends."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from ringtrain.assembly import LaunchOptions, build_spec
from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.result import Failure, FailureKind, JobResult, JobState, Straggler
from ringtrain.launch.record.snapshot import RankState, Snapshot
from ringtrain.launch.record.steptimes import StepTimes
from ringtrain.launch.recover.outcome import decide
from ringtrain.launch.supervise.detect import rank_hosts, usage_warnings
from ringtrain.launch.supervise.straggler import StragglerWatch, leave_one_out_median
from ringtrain.rank.progress import StepWindow
from ringtrain.spec import RestartPolicy, StragglerAction, StragglerPolicy, SupervisionPolicy

ALLOC = allocate(parse_host_spec("gpu01:1,gpu02:1,gpu03:1,gpu04:1"))
WHERE = rank_hosts(ALLOC)


def test_leave_one_out_median_matches_the_plain_median_of_the_others() -> None:
    rng = random.Random(7)
    for n in range(2, 40):
        values = sorted(round(rng.uniform(0, 10), 1) for _ in range(n))  # with repeats
        for v in values:
            others = list(values)
            others.remove(v)
            assert leave_one_out_median(values, v) == pytest.approx(statistics.median(others))


def test_step_totals_add_up_and_bad_numbers_are_ignored() -> None:
    t = StepTimes(None, None, 0.0)
    t = t.then({"n": 10, "compute": 0.02, "wall": 0.05}, 1.0)
    t = t.then({"n": 5, "compute": 0.04}, 2.0)
    assert t.total_steps == 15 and t.total_compute == pytest.approx(0.4)
    assert (t.compute, t.wall, t.at) == (0.04, None, 2.0)
    for bad in ({"n": 3, "compute": -1}, {"n": 3, "compute": "x"}, {"n": 3, "compute": True},
                {"n": 3, "compute": float("nan")}, {"n": 3, "wall": 0.1}):
        after = t.then(bad, 3.0)
        assert after.total_steps == 15 and after.compute is None
    assert t.then({"n": -4, "compute": 0.1}, 3.0).total_steps == 16  # a bad n counts as 1


class _Ranks:
    """Four ranks reporting every second; ``slow`` maps rank -> factor on its compute."""

    def __init__(self, base: float = 0.01, wall: float = 0.05) -> None:
        self.base, self.wall = base, wall
        self.states = {r: RankState(rank=r, host=f"node{r}", pid=100 + r) for r in range(4)}
        self.now = 0.0

    def second(self, slow: dict[int, float] | None = None, jitter: float = 0.0,
               rng: random.Random | None = None) -> Snapshot:
        self.now += 1.0
        for r, st in self.states.items():
            factor = (slow or {}).get(r, 1.0)
            noise = 1.0 + (rng.uniform(-jitter, jitter) if rng else 0.0)
            compute = self.base * factor * noise
            steps = (st.steps or StepTimes(None, None, 0.0)).then(
                {"n": 20, "compute": compute, "wall": self.wall}, self.now)
            self.states[r] = replace(st, steps=steps)
        return Snapshot(tuple(self.states.values()), None, self.now)


def _watch(**kw: object) -> StragglerWatch:
    policy = StragglerPolicy(**{"threshold": 1.5, "window_s": 10.0, **kw})  # type: ignore[arg-type]
    return StragglerWatch(policy, WHERE)


def test_a_rank_at_twice_the_others_is_named_after_a_window_not_before() -> None:
    ranks, watch = _Ranks(), _watch()
    for _ in range(20):
        assert watch.update(ranks.second()) == ([], [])
    named_at = None
    for second in range(1, 30):
        named, _ = watch.update(ranks.second({2: 2.0}))
        if named:
            named_at = second
            (s,) = named
            break
    # the window's mean crosses 1.5x when more than half of it is slow
    assert named_at is not None and 5 <= named_at <= 11, named_at
    assert (s.rank, s.host) == (2, "gpu03") and s.vs_median >= 1.5
    assert s.vs_best is not None and s.vs_best >= 1.5
    assert "gpu03: rank 2 step" in s.describe() and "the median for 10 s" in s.describe()


def test_a_named_rank_is_cleared_once_it_catches_up_and_stays_in_found() -> None:
    ranks, watch = _Ranks(), _watch()
    for _ in range(12):
        watch.update(ranks.second())
    for _ in range(15):
        watch.update(ranks.second({1: 3.0}))
    assert [s.rank for s in watch.found] == [1] and not watch.found[0].cleared
    cleared = []
    for _ in range(15):
        cleared += watch.update(ranks.second())[1]
    assert [c.rank for c in cleared] == [1]
    (kept,) = watch.found
    assert kept.cleared and kept.peak >= 2.5


def test_noise_names_nobody_and_a_window_of_spikes_is_averaged_out() -> None:
    """Healthy ranks with +-40% noise each second (over 40 seeds the 10 s means stay within
    1.41x of each other), and one rank whose every fifth second is 2x (a checkpoint pause, a
    throttled period) with +-10% noise: its 10 s mean is 1.2-1.3x, not named."""
    for seed in range(5):
        rng, ranks, watch = random.Random(seed), _Ranks(), _watch()
        for second in range(300):
            assert watch.update(ranks.second(jitter=0.4, rng=rng)) == ([], []), second
        rng, ranks, watch = random.Random(seed), _Ranks(), _watch()
        for second in range(300):
            slow = {3: 2.0} if second % 5 == 0 else {}
            assert watch.update(ranks.second(slow, jitter=0.1, rng=rng)) == ([], []), second


def test_stale_or_finished_ranks_are_not_compared() -> None:
    ranks, watch = _Ranks(), _watch()
    for _ in range(12):
        snap = ranks.second({0: 3.0})
    states = list(snap.ranks)
    states[1] = replace(states[1], done_at=snap.now)
    states[2] = replace(states[2], connected=False)
    states[3] = replace(states[3], steps=replace(states[3].steps, at=snap.now - 30))
    assert watch.scores(Snapshot(tuple(states), None, snap.now)) == []  # one rank left


def test_restart_without_turns_the_first_straggler_into_a_fault_on_its_host() -> None:
    ranks = _Ranks()
    watch = _watch(action=StragglerAction.RESTART_WITHOUT)
    notes: list[str] = []
    fault = None
    for _ in range(40):
        fault = watch.tick(ranks.second({3: 3.0}), notes.append)
        if fault:
            break
    assert fault is not None and fault.kind is FailureKind.STRAGGLER
    assert fault.hosts == ("gpu04",) and fault.ranks == (3,)
    assert notes and notes[0].startswith("straggler: gpu04: rank 3 step")
    warn = _watch(action=StragglerAction.WARN)
    assert all(warn.tick(ranks.second({3: 3.0}), notes.append) is None for _ in range(15))


def test_a_straggler_fault_restarts_without_its_host() -> None:
    fault = Fault(FailureKind.STRAGGLER, "straggler", ("gpu04",), (3,))
    result = JobResult(JobState.FAILED, 25, Path("/r"), 1.0,
                       failure=Failure(fault.kind, fault.message, fault.hosts))
    decision = decide(result, 1, RestartPolicy(max_restarts=1))
    assert decision.restart and decision.exclude == ("gpu04",)
    assert FailureKind.STRAGGLER.exit_code == 25 and FailureKind.STRAGGLER.detected


def test_restart_without_needs_restarts_and_the_policy_round_trips() -> None:
    with pytest.raises(UsageError, match="--max-restarts"):
        build_spec(LaunchOptions(script="t.py", on_straggler="restart-without"), Path("/w"))
    spec = build_spec(LaunchOptions(script="t.py", on_straggler="restart-without",
                                    max_restarts=1, straggler_window=20), Path("/w"))
    assert spec.supervision.straggler == StragglerPolicy(
        StragglerAction.RESTART_WITHOUT, 1.5, 20, asked=True)
    assert build_spec(LaunchOptions(script="t.py"), Path("/w")).supervision.straggler.asked is False


def test_asking_for_straggler_detection_without_step_times_is_said() -> None:
    policy = SupervisionPolicy(straggler=StragglerPolicy(asked=True))
    ranks = tuple(RankState(rank=r, host="h", pid=r, init_begun=True) for r in range(4))
    (text,) = usage_warnings(Snapshot(ranks, None, 1.0), ALLOC, policy, False)
    assert "no rank reported its step times" in text
    wall_only = tuple(replace(r, steps=StepTimes(None, 0.05, 1.0)) for r in ranks)
    (text,) = usage_warnings(Snapshot(wall_only, None, 1.0), ALLOC, policy, False)
    assert "whole-step times only" in text
    measured = tuple(replace(r, steps=StepTimes(0.01, 0.05, 1.0, 0.1, 10)) for r in ranks)
    assert usage_warnings(Snapshot(measured, None, 1.0), ALLOC, policy, False) == ()
    unasked = SupervisionPolicy()
    assert usage_warnings(Snapshot(ranks, None, 1.0), ALLOC, unasked, False) == ()


def test_the_rank_sends_window_means_about_once_a_second() -> None:
    now = [0.0]
    window = StepWindow(every_s=1.0, clock=lambda: now[0])
    sent = []
    for i in range(20):
        now[0] += 0.125
        msg = window.add(0.01 if i % 5 else 0.11, 0.05)  # every fifth step 11x
        if msg:
            sent.append(msg)
    assert len(sent) == 2
    assert sent[0]["n"] == 8 and sent[0]["compute"] == pytest.approx(0.035)  # the mean
    assert sent[0]["wall"] == pytest.approx(0.05)
    assert window.add(None, None) is None


def test_straggler_json_and_result_carry_it() -> None:
    s = Straggler(2, "gpu03", 1.9, 2.0, 0.019, 0.01, 60.0, 2.1)
    assert s.to_json()["host"] == "gpu03"
    result = JobResult(JobState.SUCCEEDED, 0, Path("/r"), 1.0, stragglers=(s,))
    assert result.to_json()["stragglers"][0]["vs_median"] == 1.9


def test_a_lag_that_costs_the_job_no_measurable_share_of_a_step_names_nobody() -> None:
    """During an S3 outage three ranks were named at 9.9 ms against a 5.1 ms median: 1.9x, but
    each whole step took about a second, so their lag cost the job under 1% of it. A rank is
    named only when its lag is at least MIN_SHARE of the job's whole step."""
    from ringtrain.launch.supervise.straggler import MIN_SHARE

    for wall, named_expected in ((1.0, False), (0.02, True)):
        ranks, watch = _Ranks(base=0.0051, wall=wall), _watch()
        named: list[object] = []
        for _ in range(30):
            named += watch.update(ranks.second({2: 9.9 / 5.1}))[0]
        assert bool(named) is named_expected, (wall, named)
        (score,) = [x for x in watch.scores(Snapshot(tuple(ranks.states.values()), None,
                                                      ranks.now)) if x.rank == 2]
        assert score.vs_median == pytest.approx(9.9 / 5.1, rel=0.01)
        assert score.share == pytest.approx((0.0099 - 0.0051) / wall, rel=0.01)
        assert (score.share >= MIN_SHARE) is named_expected
