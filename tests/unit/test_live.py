"""The launcher's status lines: logged to events.log and events.jsonl below both doors (the
Recorder), shown on the terminal by the CLI's view, and never the reason a stop fails (a deleted
run dir must not break Ctrl-C)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ringtrain.cli.live import LiveView
from ringtrain.launch.job.rundir import make_run_dir
from ringtrain.launch.lifecycle import EventFiles, Recorder


def test_notes_go_to_the_terminal_and_events_log(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(stream=out)
    rec = Recorder(view)
    rec.events = EventFiles(make_run_dir(tmp_path / "run"), "run-1", attempt=lambda: 1)
    rec.note("attempt 1: 2 ranks on 1 host(s)")
    rec.note("warning: rank 0 never called hvd.init()")
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
    rec = Recorder(view)
    rec.events = EventFiles(run_dir, "run-1")
    rec.note("job succeeded")
    view.flush()
    assert target.read_text() == "" and rec.events is None
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
    rec = Recorder(view)
    rec.events = EventFiles(run_dir, "run-1")
    shutil.rmtree(run_dir.path)
    rec.note("SIGTERM: stopping the job on every host")  # must not raise
    rec.note("job stopped")
    view.flush()
    text = out.getvalue()
    assert "SIGTERM: stopping the job on every host" in text and "job stopped" in text
    assert text.count("cannot write") == 1 and rec.events is None


def test_status_lines_are_logged_by_the_recorder_and_shown_off_a_terminal(
    tmp_path: Path,
) -> None:
    """The arrivals when they change and the progress when the epoch changes go to the events
    files whichever door launched (the Recorder), and a view off a terminal prints them."""
    from ringtrain.hostfile import allocate, parse_host_spec
    from ringtrain.launch.record.snapshot import Progress, RankState, Snapshot

    alloc = allocate(parse_host_spec("gpu01:1,gpu02:1"))

    def rank(r: int, host: str) -> RankState:
        return RankState(r, host, 100 + r, connected=True, init_begun=True, initialized=True,
                         last_heard=1.0)

    out = io.StringIO()
    rec = Recorder(LiveView(stream=out))
    rec.events = EventFiles(make_run_dir(tmp_path / "run"), "run-1")
    one = Snapshot((rank(0, "gpu01"),), None, now=1.0)
    both = Snapshot((rank(0, "gpu01"), rank(1, "gpu02")), Progress(epoch=1, epochs=3), now=2.0)
    for snap in (one, one, both, both):
        rec.tick(snap, alloc)
    rec.inner.flush()  # type: ignore[attr-defined]
    logged = [line.split(" ", 1)[1] for line in
              (tmp_path / "run" / "events.log").read_text().splitlines()]
    assert logged == ["ranks arrived 1/2 [gpu01 1/1 gpu02 0/1], hvd.init done 1/2",
                      "ranks arrived 2/2 [gpu01 1/1 gpu02 1/1], hvd.init done 2/2",
                      "training: epoch 1/3"]
    assert [line.removeprefix("ringtrain: ") for line in out.getvalue().splitlines()] == logged
