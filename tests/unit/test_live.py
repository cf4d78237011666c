"""The launcher's status lines: shown on the terminal, logged to events.log and events.jsonl,
and never the reason a stop fails (a deleted run dir must not break Ctrl-C)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ringtrain.cli.live import EventFiles, LiveView
from ringtrain.launch.job.rundir import make_run_dir


def test_notes_go_to_the_terminal_and_events_log(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(stream=out)
    view.events = EventFiles(make_run_dir(tmp_path / "run"), "run-1", attempt=lambda: 1)
    view.note("attempt 1: 2 ranks on 1 host(s)")
    view.note("warning: rank 0 never called hvd.init()")
    view.flush()  # the terminal is written by the view's writer thread
    assert "ringtrain: attempt 1: 2 ranks on 1 host(s)" in out.getvalue()
    log = (tmp_path / "run" / "events.log").read_text().splitlines()
    assert log[0].endswith(" attempt 1: 2 ranks on 1 host(s)")
    objects = [json.loads(line)
               for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [o["message"] for o in objects] == [line.split(" ", 1)[1] for line in log]
    assert [o["level"] for o in objects] == ["INFO", "WARNING"]
    assert {(o["run_id"], o["attempt"]) for o in objects} == {("run-1", 1)}
    for name in ("events.log", "events.jsonl"):
        assert stat.S_IMODE((tmp_path / "run" / name).stat().st_mode) == 0o600


def test_the_events_files_are_never_written_through_a_link(tmp_path: Path) -> None:
    """A link planted where events.jsonl goes (another user's file, /etc/...) is not followed:
    the view says it cannot write and carries on at the terminal."""
    target = tmp_path / "elsewhere"
    target.write_text("")
    run_dir = make_run_dir(tmp_path / "run")
    os.symlink(target, run_dir.path / "events.jsonl")
    out = io.StringIO()
    view = LiveView(stream=out)
    view.events = EventFiles(run_dir, "run-1")
    view.note("job succeeded")
    view.flush()
    assert target.read_text() == "" and view.events is None
    assert "cannot write the events" in out.getvalue() and "job succeeded" in out.getvalue()


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_still_shows_every_kind_of_warning(quiet: bool) -> None:
    out = io.StringIO()
    view = LiveView(stream=out, quiet=quiet)
    view.note("ring check: warning: keeping slow host(s) gpu02")
    view.note("attempt 1: 2 ranks on 1 host(s)")
    view.flush()
    assert "keeping slow host(s)" in out.getvalue()
    assert ("attempt 1" in out.getvalue()) is not quiet


def test_a_deleted_run_dir_degrades_to_the_terminal(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    out = io.StringIO()
    view = LiveView(stream=out)
    view.events = EventFiles(run_dir, "run-1")
    shutil.rmtree(run_dir.path)
    view.note("SIGTERM: stopping the job on every host")  # must not raise
    view.note("job stopped")
    view.flush()
    text = out.getvalue()
    assert "SIGTERM: stopping the job on every host" in text and "job stopped" in text
    assert text.count("cannot write") == 1 and view.events is None
