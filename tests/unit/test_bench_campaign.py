"""``bench campaign``'s figures from rank 0's step lines and the faults' times (pure), and its
command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.bench.launcher.campaign_figures import (
    Fault,
    Summary,
    account,
    incidents,
    report,
    row,
    summarise,
)
from ringtrain.bench.launcher.recovery import Step
from ringtrain.cli import cli

GAP = 0.2


def _run(start: float, first: int, count: int, size: int) -> list[Step]:
    """``count`` batches every GAP s from ``start``, steps ``first``, ``first + 1``, ..."""
    return [Step(start + k * GAP, first + k, size) for k in range(count)]


def _world() -> list[Step]:
    """Batches every 0.2 s with 3 ranks; a kill at 10.05 s answered by a rollback to step 50
    in a world of 2 at 11.0 s; that world grows back to 3 at 21 s (a join); a stall of 4 s
    after the batch at 29.8 s, with no rollback."""
    steps = [Step(n / 5, n, 3) for n in range(1, 53)]  # up to step 52 at 10.4 s
    steps += [Step(11 + k / 5, 51 + k, 2) for k in range(45)]  # 11.0 .. 19.8 s, to step 95
    steps += [Step(21 + k / 5, 96 + k, 3) for k in range(45)]  # 21.0 .. 29.8 s, to step 140
    steps += [Step(33.8 + k / 5, 141 + k, 3) for k in range(30)]
    return steps


def _ledger_adds_up(steps: list[Step], faults: list[Fault], launched: float,
                    ended: float) -> tuple:
    found, _, led = account(steps, faults, launched=launched, ended=ended, gap_limit=1.0)
    assert led.ettr is not None
    assert sum(i.lost_s for i in found) == pytest.approx(led.faults_s, abs=1e-9)
    assert led.lost_s == pytest.approx(led.wall_s * (1 - led.ettr), abs=1e-6)
    return found, led


def test_each_fault_gets_its_own_answer_and_a_join_answers_none() -> None:
    faults = [Fault(10.05, "kill", "h3"), Fault(29.9, "stall", "h2")]
    found, joins = incidents(_world(), faults, gap_limit=1.0)
    kill, stall = found
    assert kill.ttta_s == pytest.approx(0.95) and kill.lost == 2 and kill.size_after == 2
    assert stall.ttta_s == pytest.approx(3.9) and stall.lost == 0
    assert joins == 1


def test_time_lost_per_fault_sums_to_the_wall_time_the_ettr_says_was_lost() -> None:
    """Start-up 5 s; a kill at 20 s: 10 s blocked, 5 batches trained again in a world of 2,
    then the host back (a re-form of 2 s, 2 batches again); a stall of 4 s at 80 s; the end
    3 s after the last batch."""
    steps = _run(5.0, 1, 76, 3)  # 5.0 .. 20.0 s, to step 76
    steps += _run(30.0, 72, 100, 2)  # rolled back to 71: 5 batches again; to step 171 at 49.8
    steps += _run(51.8, 170, 140, 3)  # the join: 2 again, to step 309 at 79.6 s
    steps += _run(83.8, 310, 50, 3)  # the stall: a 4.2 s gap
    ended = steps[-1].at + 3.0
    (kill, stall), led = _ledger_adds_up(
        steps, [Fault(20.1, "kill", "h3"), Fault(79.7, "stall", "h2")], 0.0, ended)
    # the kill: nothing from 20.1 to 30.0 s, 5 batches again; the join's 2 s and 2 batches
    # again are the kill's too (it began before the next fault): its window ends at the first
    # batch past the join's high-water mark, step 172 at 52.2 s
    assert kill.ttta_s == pytest.approx(30.0 - 20.1) and kill.lost == 5 + 2
    assert kill.back_s == pytest.approx(52.2 - 20.1)
    assert kill.lost_s == pytest.approx((52.2 - 20.1) - GAP * (172 - 76))
    assert kill.lost_s == pytest.approx(9.8 + 5 * GAP + 1.8 + 2 * GAP - 0.1)  # by hand
    assert stall.back_s == pytest.approx(83.8 - 79.7)
    assert stall.lost_s == pytest.approx(83.8 - 79.7 - GAP)
    assert led.startup_s == pytest.approx(5.0 - GAP) and led.end_s == pytest.approx(3.0)
    assert abs(led.other_s) <= 2 * GAP  # the faults landed mid-batch
    assert led.faults_s + led.other_s == pytest.approx(led.wall_s - 359 * GAP - 7.8)


def test_overlapping_faults_are_not_counted_twice() -> None:
    """A kill at 20 s blocks the job until 30 s; a second kill at 29 s lands while it is still
    down, and the job is blocked again right after: 20 -> 40 s is lost once, not 10 + 11 s
    plus the second's own."""
    steps = _run(5.0, 1, 76, 3)  # to step 76 at 20.0 s
    steps += _run(30.0, 77, 3, 2)  # 30.0, 30.2, 30.4: then the second kill's block
    steps += _run(40.0, 78, 50, 2)  # rolled back 2 batches
    ended = steps[-1].at + 1.0
    (first, second), _ = _ledger_adds_up(
        steps, [Fault(20.1, "kill", "h3"), Fault(29.0, "kill", "h2")], 0.0, ended)
    # the first fault's block began before the second: the second's own disruption is the one
    # that began after it (30.4 -> 40.0)
    assert first.ttta_s == pytest.approx(30.0 - 20.1)
    assert second.ttta_s == pytest.approx(40.0 - 29.0)
    together = (40.4 - 20.1) - GAP * (80 - 76)  # step 80 at 40.4 is the first new one
    assert first.lost_s + second.lost_s == pytest.approx(together)
    assert first.lost_s == pytest.approx(29.0 - 20.1)  # until the later fault took over
    # their windows overlap (29.0 -> 30.0 s): summing time back would count that twice
    assert (first.back_s or 0) + (second.back_s or 0) > together + 0.9
    # the second landed while the job was not training (inside the first's pause)
    assert (first.amid, second.amid) == (False, True)
    s = summarise("memory", steps, [Fault(20.1, "kill", "h3"), Fault(29.0, "kill", "h2")],
                  launched=0.0, ended=ended, accuracy=None, exit_code=0, interval=30.0)
    assert "1 landed while it was not training" in row(s)


def test_a_fault_with_no_disruption_of_its_own_takes_none_of_the_next_ones() -> None:
    """A stall of a process outside the world (nothing happens), then a kill 60 s later: the
    stall gets no time back and no lost time; the kill's disruption is the kill's."""
    steps = _run(5.0, 1, 400, 3)  # to step 400 at 84.8 s, undisturbed
    steps += _run(95.0, 398, 100, 2)
    ended = steps[-1].at + 1.0
    (stall, kill), led = _ledger_adds_up(
        steps, [Fault(24.9, "stall", "h2"), Fault(84.9, "kill", "h3")], 0.0, ended)
    assert stall.ttta_s is None and stall.back_s == 0.0 and stall.lost_s == 0.0
    assert kill.ttta_s == pytest.approx(95.0 - 84.9)
    assert led.faults_s == pytest.approx(kill.lost_s)


def test_a_job_that_never_came_back_loses_the_rest_to_its_fault() -> None:
    steps = _run(5.0, 1, 76, 3)
    (kill,), led = _ledger_adds_up(steps, [Fault(20.1, "kill", "h3")], 0.0, 200.0)
    assert kill.ttta_s is None  # no batch after it at all: no disruption seen, but
    assert kill.back_s is None and kill.lost_s == pytest.approx(200.0 - 20.1)  # not the end's
    steps += [Step(31.0, 70, 2)]  # one batch of a smaller world, then nothing
    (kill,), led = _ledger_adds_up(steps, [Fault(20.1, "kill", "h3")], 0.0, 200.0)
    assert kill.back_s is None and kill.lost_s == pytest.approx(200.0 - 20.1)
    assert led.end_s == 0.0


def test_a_fault_with_no_disruption_after_it_has_no_answer() -> None:
    steps = [Step(0.2 * n, n, 3) for n in range(1, 20)]
    (late,), joins = incidents(steps, [Fault(3.0, "link", "h2")], gap_limit=1.0)
    assert late.ttta_s is None and joins == 0


def test_summary_row_names_a_hang_and_faults_without_a_disruption() -> None:
    steps = [Step(0.2 * n, n, 3) for n in range(1, 20)]
    s = summarise("memory", steps, [Fault(3.0, "kill", "h2")], launched=0.0, ended=7.6,
                  accuracy=0.9, exit_code=None, interval=60.0)
    assert s.ettr == pytest.approx(0.5)
    text = row(s, 0.95)
    assert "hang" in text and "1 faults never followed by training again" in text
    assert "-5.0" in text  # accuracy against the fault-free run's, in points


def test_one_table_per_rate_each_with_the_fault_free_run() -> None:
    def summary(mode: str, interval: float | None, accuracy: float) -> Summary:
        return Summary(mode, (), 0, 0.9, accuracy, 0, 100.0, 10, None, interval)

    lines = report([summary("clean", None, 0.97), summary("memory", 60.0, 0.96),
                    summary("memory", 30.0, 0.95)])
    titles = [n for n, line in enumerate(lines) if line.startswith("one fault every")]
    assert [lines[n] for n in titles] == ["one fault every 60 s", "one fault every 30 s"]
    assert sum(line.startswith("clean") for line in lines) == 2
    assert "-1.0" in lines[titles[0] + 2] and "-2.0" in lines[titles[1] + 2]


def test_the_anchor_gets_only_its_own_options() -> None:
    from ringtrain.bench.launcher.campaign import launcher_options

    anchor = launcher_options("horovodrun", (10, 40), 3)
    assert anchor == ("--blacklist-cooldown-range", "10", "40")
    assert "--max-restarts" in launcher_options("memory", (10, 40), 3)
    assert "--spares" in launcher_options("spare", (10, 40), 0)
    assert launcher_options("restart", (10, 40), 3) == ()


def test_horovodruns_own_parser_takes_the_anchors_options_and_refuses_ours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from horovod.runner.launch import parse_args

    from ringtrain.bench.launcher.campaign import launcher_options

    def parse(options: tuple[str, ...]) -> object:
        monkeypatch.setattr("sys.argv", ["horovodrun", "-np", "3", *options, "python", "x.py"])
        return parse_args()

    assert parse(launcher_options("horovodrun", (10, 40), 3)).cooldown_range == [10, 40]
    with pytest.raises(SystemExit):  # what the anchor got before: the table was lost
        parse(launcher_options("memory", (10, 40), 3))


def test_runs_start_with_the_fault_free_one_and_cover_each_rate() -> None:
    from ringtrain.bench.launcher.campaign import parse_intervals, runs

    assert runs(["memory", "clean", "horovodrun"], parse_intervals("30,60")) == [
        ("clean", 60.0), ("memory", 60.0), ("horovodrun", 60.0), ("memory", 30.0),
        ("horovodrun", 30.0)]


def test_the_command_refuses_an_unknown_mode() -> None:
    result = CliRunner().invoke(cli, ["bench", "campaign", "--modes", "memory,torchrun"])
    assert result.exit_code == 2 and "torchrun" in result.output


def test_the_command_refuses_a_short_interval() -> None:
    result = CliRunner().invoke(cli, ["bench", "campaign", "--intervals", "60,2"])
    assert result.exit_code == 2 and "at least 5 s" in result.output


def test_the_command_knows_the_benchmarks_modes() -> None:
    from ringtrain.bench.launcher import campaign
    from ringtrain.cli.bench_campaign_cmd import MODES

    assert MODES == campaign.MODES


def test_the_task_script_compiles() -> None:
    from ringtrain.bench.launcher.campaign_task import CAMPAIGN_SCRIPT

    compile(CAMPAIGN_SCRIPT, "train.py", "exec")


def test_a_job_that_failed_early_counts_only_the_batches_it_got_through() -> None:
    from ringtrain.bench.launcher.campaign_figures import ettr

    steps = [Step(0.2 * n, n, 3) for n in range(1, 11)]  # 10 of 100 batches, then it failed
    assert ettr(steps, total_steps=100, wall_s=4.0) == pytest.approx(0.5)


def test_the_old_single_interval_option_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    from ringtrain.bench.launcher import campaign

    seen: list[list[str]] = []
    monkeypatch.setattr(campaign, "main", lambda argv: seen.append(argv) or 0)
    result = CliRunner().invoke(cli, ["bench", "campaign", "--interval", "30"])
    assert result.exit_code == 0, result.output
    assert seen[0][seen[0].index("--intervals") + 1] == "30"


def test_the_tables_come_again_from_a_kept_campaign_json(tmp_path: Path) -> None:
    from ringtrain.bench.launcher import campaign
    from ringtrain.bench.launcher.campaign_figures import as_json

    steps = _run(5.0, 1, 76, 3) + _run(30.0, 72, 100, 2)
    faults = [Fault(20.1, "kill", "h3")]
    made = [summarise("memory", steps, faults, launched=0.0, ended=52.0, accuracy=0.97,
                      exit_code=0, interval=60.0),
            summarise("clean", steps[:70], [], launched=0.0, ended=20.0, accuracy=0.98,
                      exit_code=0)]
    kept = tmp_path / "campaign.json"
    kept.write_text(json.dumps([{**as_json(s), "step_lines": [[x.at, x.step, x.size] for x in st]}
                                for s, st in zip(made, (steps, steps[:70]), strict=True)]))
    assert campaign.reload([kept]) == made
    assert campaign.main(["--figures", str(kept)]) == 0


def test_a_job_that_failed_after_training_again_loses_its_tail_to_the_fault() -> None:
    """The kill is absorbed (training again at 30 s), then the job stops at 40 s and fails
    at 80 s: 40 -> 80 s is the kill's, not the end's (the end is evaluation and exit)."""
    steps = _run(5.0, 1, 76, 3) + _run(30.0, 77, 51, 2)  # to step 127 at 40.0 s
    faults = [Fault(20.1, "kill", "h3")]
    ok = summarise("memory", steps, faults, launched=0.0, ended=80.0, accuracy=None,
                   exit_code=0)
    failed = summarise("memory", steps, faults, launched=0.0, ended=80.0, accuracy=None,
                       exit_code=1)
    assert ok.ledger is not None and failed.ledger is not None
    assert ok.ledger.end_s == pytest.approx(40.0) and failed.ledger.end_s == 0.0
    assert failed.incidents[0].back_s is None
    assert failed.incidents[0].lost_s == pytest.approx(ok.incidents[0].lost_s + 40.0)
    assert failed.ledger.lost_s == pytest.approx(ok.ledger.lost_s)


def test_a_job_without_a_batch_for_the_deadline_is_hung() -> None:
    """The faults stop and the job is ended as hung once no batch came for --deadline
    seconds (a job with no step yet is the start-up's to judge)."""
    import time

    from ringtrain.bench.launcher.campaign import _stalled

    now = time.time()
    assert _stalled([f"STEP {now - 400:.3f} 7 3\n"], 300.0)
    assert not _stalled([f"STEP {now - 100:.3f} 7 3\n"], 300.0)
    assert not _stalled(["starting\n"], 300.0)


def test_the_module_refuses_an_unknown_mode_too(capsys: pytest.CaptureFixture[str]) -> None:
    from ringtrain.bench.launcher.campaign import main

    with pytest.raises(SystemExit) as exit_:
        main(["--modes", "memory,torchrun"])
    assert exit_.value.code == 2
    assert "torchrun is not a mode; pick from restart,elastic" in capsys.readouterr().err
