"""The run reported on the value and read back as the value (issue 22, item 2): result.json is
``JobResult.run_json()``; ``JobResult.from_json`` gives back an equal value, so ``runs show``
prints the very report the launch printed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.launch.lifecycle import durations
from ringtrain.launch.record.result import (
    Failure,
    FailureKind,
    HostTeardown,
    JobResult,
    JobState,
    RankFailure,
    ResumePoint,
    Straggler,
)


def _run(run_dir: Path) -> JobResult:
    first = JobResult(
        JobState.FAILED, 21, run_dir, 40.9,
        failure=Failure(FailureKind.HOST_LOST, "host gpu03 silent for 10 s", ("gpu03",),
                        (RankFailure(4, "gpu03", None, None, ("epoch 2",)),)),
        teardown=(HostTeardown("gpu01", 2), HostTeardown("gpu03", 0, (), "not verified")),
        attempt=1, decision="restarting: attempt 2 of 2, without gpu03 for a cooldown",
        excluded=("gpu03",), detected_at=1.5, torn_down_at=2.0, teardown_s=0.5,
    )
    return JobResult(
        JobState.FAILED, 1, run_dir, 110.1,
        failure=Failure(FailureKind.RANK_EXIT, "rank 1 on gpu01 failed (exit code 1)",
                        ("gpu01",), (RankFailure(1, "gpu01", 1, None, ("Traceback", "boom")),)),
        teardown=(HostTeardown("gpu01", 0),), attempt=2, warnings=("w",),
        stragglers=(Straggler(2, "gpu02", 2.5, 1.9, 0.2, 0.08, 61.0, 3.0, cleared=True),),
        decision="restart budget spent (1 of 1)", earlier=(first,), max_restarts=1, np_asked=8,
        resume_point=ResumePoint("s3://b/run", 138, 6, "000000000138-x"), wall_s=161.2,
    )


def test_result_json_reads_back_as_the_same_value(tmp_path: Path) -> None:
    result = _run(tmp_path / "runs" / "20261125-010203-ab12")
    data = json.loads(json.dumps(result.run_json()))
    back = JobResult.from_json(data)
    assert back == result
    assert back.what_ringtrain_did() == result.what_ringtrain_did()
    assert data["schema"] == 2 and data["total_s"] == 161.2 and len(data["attempts"]) == 2
    assert ResumePoint.from_json({"url": "s3://b", "error": "down"}) == ResumePoint(
        "s3://b", error="down")


def test_the_summary_counts_the_whole_job_and_each_attempt(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert durations(result) == "161.2 s in 2 attempts (40.9 s, 110.1 s)"
    did = result.what_ringtrain_did()
    assert "Attempt 2 of 2 (restarts used up)" in did
    assert "after attempt 1: restarting: attempt 2 of 2, without gpu03" in did
    assert "Last committed checkpoint: step 138 (epoch 6) at s3://b/run" in did


def test_runs_show_prints_the_report_the_launch_printed(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20261125-010203-ab12"
    (run_dir / "attempt-1").mkdir(parents=True)
    result = _run(run_dir)
    (run_dir / "result.json").write_text(json.dumps(result.run_json()))
    shown = CliRunner().invoke(cli, ["runs", "--runs-dir", str(tmp_path / "runs"), "show",
                                     run_dir.name])
    assert shown.exit_code == 0, shown.output
    assert result.what_ringtrain_did() in shown.output
    assert "fault: host gpu03 silent for 10 s" in shown.output
    assert "first failing rank: 1 on gpu01 (exit code 1)" in shown.output
    assert "then: restarting: attempt 2 of 2, without gpu03" in shown.output


def test_the_recovery_ledger_times_each_restart_from_its_detection(tmp_path: Path) -> None:
    """Issue 24, item 1: every incident in result.json and runs show: detected, torn down,
    restarted, ranks arrived, hvd.init done, training again (TTTA), resumed from where."""
    from types import SimpleNamespace

    from ringtrain.launch.record.gpurecheck import Recheck
    from ringtrain.launch.record.milestones import Milestones, observe
    from ringtrain.launch.record.result import incidents
    from ringtrain.launch.record.snapshot import Progress, RankState, Snapshot

    marks = Milestones(started=102.0)
    ranks = (RankState(0, "h", 1), RankState(1, "h", 2))
    marks = observe(marks, Snapshot(ranks[:1], None, 0), 2, 103.0)
    assert marks.arrived is None
    marks = observe(marks, Snapshot(ranks, None, 0), 2, 104.0)
    ready = tuple(SimpleNamespace(initialized=True) for _ in ranks)
    marks = observe(marks, Snapshot(ready, None, 0), 2, 110.0)  # type: ignore[arg-type]
    marks = observe(marks, Snapshot(ready, Progress(epoch=3), 0), 2, 131.0)  # type: ignore[arg-type]
    marks = observe(marks, Snapshot(ready, Progress(epoch=4), 0), 2, 140.0)  # type: ignore[arg-type]
    assert (marks.arrived, marks.initialized, marks.training) == (104.0, 110.0, 131.0)
    run = _run(tmp_path / "runs" / "r1")
    first = run.earlier[0]
    first = JobResult(first.state, first.exit_code, first.run_dir, first.duration_s,
                      first.failure, detected_at=100.0, torn_down_at=101.0,
                      resume_point=ResumePoint("s3://b/r", 40, 2, "x"), attempt=1,
                      recheck=Recheck(101.0, 101.5, 2, (("gpu03", 0.4),)))
    final = JobResult(run.state, run.exit_code, run.run_dir, run.duration_s, run.failure,
                      attempt=2, milestones=marks, earlier=(first,))
    (incident,) = incidents(final.attempts)
    assert incident.ttta_s == 31.0 and incident.resumed_step == 40
    assert dict(incident.stages()) == {"torn down": 1.0, "re-checked": 1.5, "restarted": 2.0,
                                       "ranks arrived": 4.0, "hvd.init done": 10.0,
                                       "training again": 31.0}
    assert "host gpu03 silent for 10 s: torn down 1.0 s" in incident.describe()
    assert "re-check: gpu03 freed its GPUs after 0.4 s" in incident.describe()
    data = final.run_json()
    assert data["incidents"][0]["ttta_s"] == 31.0
    back = JobResult.from_json(json.loads(json.dumps(data)))
    assert back.attempts[-1].milestones == marks
    assert back.attempts[0].recheck == first.recheck
