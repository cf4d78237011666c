"""The launcher's status lines: shown on the terminal, logged to events.log, and never the
reason a stop fails (a deleted run dir must not break Ctrl-C)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from ringtrain.cli.live import LiveView


def test_notes_go_to_the_terminal_and_events_log(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(stream=out)
    view.events = tmp_path / "events.log"
    view.note("attempt 1: 2 ranks on 1 host(s)")
    view.flush()  # the terminal is written by the view's writer thread
    assert "ringtrain: attempt 1: 2 ranks on 1 host(s)" in out.getvalue()
    assert view.events.read_text().endswith(" attempt 1: 2 ranks on 1 host(s)\n")


def test_a_deleted_run_dir_degrades_to_the_terminal(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = io.StringIO()
    view = LiveView(stream=out)
    view.events = run_dir / "events.log"
    shutil.rmtree(run_dir)
    view.note("SIGTERM: stopping the job on every host")  # must not raise
    view.note("job stopped")
    view.flush()
    text = out.getvalue()
    assert "SIGTERM: stopping the job on every host" in text and "job stopped" in text
    assert text.count("cannot write") == 1 and view.events is None
