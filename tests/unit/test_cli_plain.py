"""Strings from files and hosts in `ringtrain runs` and `runs show` (issue 40 item 5): a
planted ``[/x]`` (rich markup: a MarkupError ended the command) or an ESC sequence (it would
drive the terminal) is shown as text."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console
from rich.table import Table

from ringtrain.cli import cli
from ringtrain.cli.plain import cell, printable
from ringtrain.launch.record.result import (
    Failure,
    FailureKind,
    HostTeardown,
    JobResult,
    JobState,
    RankFailure,
)

PLANTED = "[/x][link=http://e]gpu[/link]\x1b[2J\x1b]0;owned\x07"


def _planted_run(runs: Path) -> Path:
    run_dir = runs / "20261125-010203-ab12"
    (run_dir / "attempt-1").mkdir(parents=True)
    result = JobResult(
        JobState.FAILED, 1, run_dir, 3.0,
        failure=Failure(FailureKind.RANK_EXIT, f"rank 1 on {PLANTED} failed", (PLANTED,),
                        (RankFailure(1, PLANTED, 1, None, (f"Traceback {PLANTED}",)),)),
        teardown=(HostTeardown(PLANTED, 0, (), PLANTED),), attempt=1, decision=PLANTED)
    data = result.run_json() | {"last_checkpoint": PLANTED}
    (run_dir / "result.json").write_text(json.dumps(data))
    (run_dir / "attempt-1" / "plan.json").write_text(json.dumps(
        {"hosts": [{"name": PLANTED}], "np": 2}))
    return run_dir


def test_runs_and_runs_show_print_planted_strings_as_text(tmp_path: Path) -> None:
    run_dir = _planted_run(tmp_path / "runs")
    listed = CliRunner().invoke(cli, ["runs", "--runs-dir", str(tmp_path / "runs")])
    shown = CliRunner().invoke(cli, ["runs", "--runs-dir", str(tmp_path / "runs"), "show",
                                     run_dir.name])
    for out in (listed, shown):
        assert out.exit_code == 0, out.output
        assert "\x1b" not in out.output and "\x07" not in out.output
    assert "[/x]" in listed.output.replace("\n", "")  # literal, whatever the folding
    assert "[/x][link=http://e]gpu[/link]?[2J?]0;owned?" in shown.output
    assert "first failing rank: 1 on [/x]" in shown.output


def test_a_cell_is_never_markup_and_never_a_control_sequence() -> None:
    assert printable("a\x1b[31mb\tc\nd") == "a?[31mb?c?d"
    table = Table()
    table.add_column("x")
    table.add_row(cell(PLANTED, "red"))
    console = Console(record=True, width=200, force_terminal=True)
    console.print(table)  # a str cell of PLANTED raises MarkupError here
    text = console.export_text()
    assert "[/x][link=http://e]gpu[/link]?[2J?]0;owned?" in text
