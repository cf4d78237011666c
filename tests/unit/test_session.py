"""Session placement across restarts: -np on the first attempt, --min-np after a host is lost."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from ringtrain.errors import AllocationError, SetupError
from ringtrain.hostfile import Allocation, parse_host_spec
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.launch.record.result import JobResult, JobState
from ringtrain.launch.recover.outcome import Decision
from ringtrain.launch.reporter import NullReporter
from ringtrain.launch.session import Session
from ringtrain.probe.hostprobe import probe_argv
from ringtrain.probe.verdict import PreflightPolicy
from ringtrain.spec import LaunchSpec, RestartPolicy
from tests.fakes import FakeRemote, ip_lines, probe_stdout


class Verdicts(NullReporter):
    """Records the slots each attempt's pre-flight was asked for (the policy's np)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int | None] = []

    def verdict(self, inventory: object, report: object, verdict: object,
                policy: PreflightPolicy) -> None:
        self.asked.append(policy.np)


def _session(np: int | None, restart: RestartPolicy, reporter: Verdicts) -> Session:
    inventory = parse_host_spec("gpu01:2,gpu02:2")
    remote = FakeRemote()  # the probe's answers: two CPU hosts on one subnet
    for i, host in enumerate(("gpu01", "gpu02"), start=1):
        remote.on(host, probe_argv(sys.executable),
                  stdout=probe_stdout(host, net=ip_lines(("eth0", f"10.0.0.{i}/24"))))
    return Session(
        LaunchSpec(script="train.py", np=np, runs_dir=Path("/nonexistent"), restart=restart),
        inventory,
        remote,
        reporter,
        SessionEnv("r1", {}, is_root=False, python="python3"),
    )


def _place(session: Session, attempt: int) -> Allocation:
    return session.place(attempt)[1]


def _lose_gpu02(session: Session) -> None:
    session.results.append(JobResult(JobState.FAILED, 1, Path("/r"), 1.0))
    session.rest = session.rest.after(Decision(True, "x", exclude=("gpu02",)),
                                      time.monotonic(), 600)


def test_restart_shrinks_to_min_np_and_preflight_is_asked_for_the_floor() -> None:
    reporter = Verdicts()
    session = _session(4, RestartPolicy(max_restarts=1, min_np=2), reporter)
    first = _place(session, 1)
    assert first.np == 4
    _lose_gpu02(session)
    second = _place(session, 2)
    assert second.np == 2 and [h.name for h in second.hosts] == ["gpu01"]
    assert reporter.asked == [4, 2]


def test_restart_without_min_np_needs_the_first_attempts_size() -> None:
    for np in (4, None):  # -np 4, or every slot (4)
        reporter = Verdicts()
        session = _session(np, RestartPolicy(max_restarts=1), reporter)
        assert _place(session, 1).np == 4
        _lose_gpu02(session)
        with pytest.raises(AllocationError) as info:
            _place(session, 2)
        assert "only 2 slots left after excluding gpu02; the restart needs 4" in info.value.message
        assert "--min-np" in info.value.hint
        assert reporter.asked == [np]  # refused before probing anyone again


def test_an_unusable_runs_dir_is_refused_before_any_ssh(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    remote = FakeRemote()  # no answers: any probe would fail the test
    spec = LaunchSpec(script="train.py", runs_dir=blocker / "runs")
    session = Session(spec, parse_host_spec("gpu01:2"), remote,
                      env=SessionEnv("r1", {}, is_root=False, python="python3"))
    with pytest.raises(SetupError) as info:
        session.run()
    assert f"cannot use the run directory {blocker}/runs/r1" in info.value.message
    assert "--runs-dir" in info.value.hint and remote.calls == []


def test_a_host_suspected_after_a_kill_is_avoided_only_when_the_others_suffice() -> None:
    for min_np, expected in ((2, ["gpu01"]), (None, ["gpu01", "gpu02"])):
        reporter = Verdicts()
        session = _session(None, RestartPolicy(max_restarts=1, min_np=min_np), reporter)
        assert _place(session, 1).np == 4
        session.results.append(JobResult(JobState.FAILED, 137, Path("/r"), 1.0))
        session.rest = session.rest.after(Decision(True, "x", suspect=("gpu02",)),
                                          time.monotonic(), 600)
        assert [h.name for h in _place(session, 2).hosts] == expected
        kept = any("keeping gpu02: a rank there was killed" in n for n in reporter.notes)
        assert kept is (min_np is None)  # a 4-rank restart needs gpu02's slots back


def test_host_rest_is_a_value_that_forgives_after_its_cooldown() -> None:
    from ringtrain.launch.recover.hostrest import HostRest, choose

    inventory = parse_host_spec("gpu01:2,gpu02:2,gpu03:2")
    rest = HostRest().after(Decision(True, "x", exclude=("gpu02",), suspect=("gpu03",)), 100, 60)
    assert rest.resting(120) == {"gpu02"} and rest.suspects(120) == {"gpu03"}
    chosen = choose(inventory, rest, 120, floor=2)
    assert [h.name for h in chosen.inventory.hosts] == ["gpu01"] and not chosen.kept_suspects
    kept = choose(inventory, rest, 120, floor=4)  # without gpu03 too few slots: keep it
    assert [h.name for h in kept.inventory.hosts] == ["gpu01", "gpu03"]
    assert kept.kept_suspects == ("gpu03",)
    assert len(choose(inventory, rest, 161, floor=6).inventory.hosts) == 3  # cooldown over
    assert HostRest() == HostRest()  # nothing mutable: a Session replaces it
