"""``bench campaign``'s figures from rank 0's step lines and the faults' times (pure), and its
command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ringtrain.bench.launcher.campaign_figures import Fault, incidents, row, summarise
from ringtrain.bench.launcher.recovery import Step
from ringtrain.cli import cli


def _world() -> list[Step]:
    """Batches every 0.2 s with 3 ranks; a kill at 10.05 s answered by a rollback to step 50
    in a world of 2 at 11.0 s; that world grows back to 3 at 21 s (a join); a stall of 4 s
    after the batch at 29.8 s, with no rollback."""
    steps = [Step(n / 5, n, 3) for n in range(1, 53)]  # up to step 52 at 10.4 s
    steps += [Step(11 + k / 5, 51 + k, 2) for k in range(45)]  # 11.0 .. 19.8 s, to step 95
    steps += [Step(21 + k / 5, 96 + k, 3) for k in range(45)]  # 21.0 .. 29.8 s, to step 140
    steps += [Step(33.8 + k / 5, 141 + k, 3) for k in range(30)]
    return steps


def test_each_fault_gets_its_own_answer_and_a_join_answers_none() -> None:
    faults = [Fault(10.05, "kill", "h3"), Fault(29.9, "stall", "h2")]
    found, joins = incidents(_world(), faults, gap_limit=1.0)
    kill, stall = found
    assert kill.ttta_s == pytest.approx(0.95) and kill.lost == 2 and kill.size_after == 2
    assert stall.ttta_s == pytest.approx(3.9) and stall.lost == 0
    assert joins == 1


def test_a_fault_with_no_disruption_after_it_has_no_answer() -> None:
    steps = [Step(0.2 * n, n, 3) for n in range(1, 20)]
    (late,), joins = incidents(steps, [Fault(3.0, "link", "h2")], gap_limit=1.0)
    assert late.ttta_s is None and joins == 0


def test_summary_row_names_a_hang_and_unanswered_faults() -> None:
    steps = [Step(0.2 * n, n, 3) for n in range(1, 20)]
    s = summarise("memory", steps, [Fault(3.0, "kill", "h2")], total_steps=19, wall_s=7.6,
                  accuracy=0.9, exit_code=None)
    assert s.ettr == pytest.approx(0.5)
    text = row(s)
    assert "hang" in text and "1 faults with no answer seen" in text


def test_the_command_refuses_an_unknown_mode() -> None:
    result = CliRunner().invoke(cli, ["bench", "campaign", "--modes", "memory,torchrun"])
    assert result.exit_code == 2 and "torchrun" in result.output


def test_the_command_knows_the_benchmarks_modes() -> None:
    from ringtrain.bench.launcher import campaign
    from ringtrain.cli.bench_campaign_cmd import MODES

    assert MODES == campaign.MODES


def test_a_job_that_failed_early_counts_only_the_batches_it_got_through() -> None:
    from ringtrain.bench.launcher.campaign_figures import ettr

    steps = [Step(0.2 * n, n, 3) for n in range(1, 11)]  # 10 of 100 batches, then it failed
    assert ettr(steps, total_steps=100, wall_s=4.0) == pytest.approx(0.5)
