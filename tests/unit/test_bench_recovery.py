"""``bench recovery``'s figures from a run's step lines (pure), and its command line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.bench.launcher.recovery import (
    HEADER,
    analyse,
    count_resets,
    ledger_stages,
    parse_steps,
)
from ringtrain.cli import cli


def _lines() -> list[str]:
    lines = [f"[0] STEP {100 + i * 0.2:.3f} {i} 3\n" for i in range(1, 41)]  # 40 batches
    lines.append("ringtrain: elastic: rank 2 on gpu03 ended ...\n")
    lines.append("[0] STEP 108.100 41 3\n")  # a batch the survivors finished before the reset
    lines += [f"[1] STEP {110 + i * 0.3:.3f} {36 + i} 2\n" for i in range(1, 60)]
    lines.append("garbage STEP x y\n")
    return lines


def test_ttta_redone_batches_and_ettr_from_the_step_lines() -> None:
    steps = parse_steps(_lines())
    assert len(steps) == 100 and steps[0].step == 1 and steps[-1].size == 2
    out = analyse("elastic", steps, t0=108.05, launched=90.0, ended=130.0, total_steps=96,
                  accuracy=0.9, exit_code=0)
    assert out.ttta_s == pytest.approx(110.3 - 108.05)
    assert out.redone == 41 - 36  # the last step before the kill, less the one resumed from
    assert out.ettr == pytest.approx(96 * 0.2 / 40.0)
    assert out.row().split()[0] == "elastic" and "TTTA s" in HEADER and "redone" in HEADER


def test_a_run_that_never_trained_again_has_no_ttta() -> None:
    steps = parse_steps([f"STEP {100 + i:.3f} {i} 3\n" for i in range(1, 10)])
    out = analyse("restart", steps, t0=105.5, launched=90.0, ended=120.0, total_steps=96,
                  accuracy=None, exit_code=1)
    assert out.ttta_s is None and out.redone is None and "-" in out.row()


def test_the_command_refuses_an_unknown_mode_before_starting_anything() -> None:
    from ringtrain.bench.launcher import recovery
    from ringtrain.cli.bench_recovery_cmd import MODES

    assert MODES == recovery.MODES
    result = CliRunner().invoke(cli, ["bench", "recovery", "--modes", "elastic,torchrun"])
    assert result.exit_code == 2
    assert "torchrun: choose from restart, elastic, memory, horovodrun" in result.output


def test_resets_and_the_ledgers_stages_come_from_the_run() -> None:
    """One reset per fault is the goal: the most any survivor said it went through."""
    said = ("ringtrain: elastic: rank {} (pid 7): a collective failed (x); forming the ring "
            "again and running the script again in this process (reset {}, last memory "
            "commit: epoch 2 step 8; 2 ring connection(s) shut down)\n")
    assert count_resets([said.format(1, 1), said.format(2, 1), said.format(1, 2)]) == 2
    assert count_resets(["STEP 1 2 3\n"]) is None


def test_the_ledgers_stages_are_read_from_result_json(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20261127-x"
    run.mkdir(parents=True)
    absorbed = {"rank": 2, "stages_s": {"reset": 0.1, "ring formed": 0.6, "restored": 1.2,
                                        "training again": 1.9}}
    (run / "result.json").write_text(json.dumps({"attempts": [{"absorbed": [absorbed]}]}))
    assert ledger_stages(tmp_path / "runs") == (0.1, 0.6, 1.2)
    assert ledger_stages(tmp_path / "none") == ()
    out = analyse("memory", [], t0=1, launched=0, ended=2, total_steps=1, accuracy=None,
                  exit_code=0)
    row = replace(out, ranks=8, killed="gpu08", resets=1, stages=(0.1, 0.6, 1.2)).row()
    assert row.split()[:7] == ["memory", "8", "gpu08", "-", "1", "0.1", "0.6"]
    assert len(row.split()) == len(HEADER.split()) - 2  # "TTTA s" and "wall s": two words


def test_the_command_refuses_a_world_too_small_to_lose_a_rank() -> None:
    result = CliRunner().invoke(cli, ["bench", "recovery", "--ranks", "2,8"])
    assert result.exit_code == 2 and "world sizes of at least 3" in result.output


def test_the_stage_table_splits_each_reset_and_projects_each_phase() -> None:
    """Issue 38 item 5: per world size the median of each phase of a reset (the ledger's
    reset, ring formed, restored and the TTTA), then a line per phase projected to 512 and
    4,096 ranks."""
    from ringtrain.bench.launcher.recovery import Outcome
    from ringtrain.bench.launcher.recovery_stages import fit_line, phases, stage_table

    def run(ranks: int, formed: float, ttta: float) -> Outcome:
        return Outcome("memory", ttta, 0, 0.5, None, 0, 60.0, ranks=ranks, killed="gpu03",
                       resets=1, stages=(0.1, formed, formed + 1.0))
    assert phases(run(8, 5.0, 9.0)) == pytest.approx((0.1, 4.9, 1.0, 3.0))
    assert fit_line([(4, 2.0), (8, 4.0), (16, 8.0)]) == pytest.approx((0.0, 0.5))
    assert fit_line([(8, 1.0), (8, 2.0)]) is None  # one size: no line
    rows = stage_table([run(4, 2.0, 5.0), run(8, 4.0, 7.0), run(8, 4.2, 7.2),
                        Outcome("restart", 40.0, 5, 0.3, None, 0, 90.0, ranks=8)])
    text = "\n".join(rows)
    assert "detect->reset" in text and "first step" in text
    (eight,) = [r for r in rows if r.split()[:1] == ["8"]]
    assert eight.split()[1:] == ["0.1", "4.0", "1.0", "2.0", "7.1"]  # medians of the two
    (far,) = [r for r in rows if r.startswith("  ~512")]
    # re-form 1.9 s at 4, 4.0 s at 8: -0.2 + 0.525 x ranks -> 268.6 s at 512
    assert far.split()[2] == "268.6"
    assert stage_table([Outcome("restart", 40.0, 5, 0.3, None, 0, 90.0)]) == []


def test_keep_refuses_a_folder_that_holds_something(tmp_path: Path) -> None:
    """--keep DIR keeps every run's logs (an incident worth reading is not deleted with the
    temporary folder); a folder that already holds files is refused before any run."""
    from ringtrain.bench.launcher import recovery

    (tmp_path / "old.log").write_text("x")
    with pytest.raises(SystemExit, match="not a new or empty folder"):
        recovery.main(["--keep", str(tmp_path)])
    with pytest.raises(SystemExit, match="not a new or empty folder"):
        recovery.main(["--keep", str(tmp_path / "old.log")])
