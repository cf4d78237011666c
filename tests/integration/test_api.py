"""ringtrain.run(...): the Python API runs the same spec and Session as `ringtrain launch`."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ringtrain
from ringtrain.errors import JobFailed, UsageError
from ringtrain.launch.record.result import FailureKind, JobState
from ringtrain.launch.reporter import NullReporter

pytestmark = [pytest.mark.slow, pytest.mark.mpi]

HELLO = "import sys\nprint('hello', sys.argv[1:], flush=True)\n"
BROKEN = """\
import os
if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    raise RuntimeError("rank one broke")
"""


def test_run_returns_the_job_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hello.py").write_text(HELLO)
    reporter = NullReporter()
    result = ringtrain.run("hello.py", "--x", hosts="localhost:2", runs_dir=tmp_path / "runs",
                           reporter=reporter)
    assert result.state is JobState.SUCCEEDED and result.exit_code == 0
    assert (result.run_dir / "result.json").is_file()
    assert any(n.startswith("attempt 1: 2 ranks") for n in reporter.notes)
    assert "hello ['--x']" in (result.attempt_dir / "rank.1.log").read_text()


def test_a_failed_job_is_a_result_or_with_check_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text(BROKEN)
    result = ringtrain.run("broken.py", hosts="localhost:2", runs_dir="runs")
    assert result.state is JobState.FAILED and result.failure is not None
    assert result.failure.kind is FailureKind.RANK_EXIT and result.failure.root is not None
    assert result.failure.root.rank == 1
    assert any("RuntimeError: rank one broke" in line for line in result.failure.root.log_tail)
    with pytest.raises(JobFailed) as info:
        ringtrain.run("broken.py", hosts="localhost:2", runs_dir="runs", check=True)
    assert "rank 1 on localhost failed (exit code 1)" in info.value.message


def test_misuse_is_a_typed_error_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown option 'max_restart'") as info:
        ringtrain.run("x.py", hosts="localhost:2", max_restart=1)
    assert "max_restarts" in info.value.hint
    with pytest.raises(UsageError, match="-np 0"):
        ringtrain.run("x.py", hosts="localhost:2", np=0)
    assert not (tmp_path / "runs").exists()


SLEEPY = """\
import time
print("ready", flush=True)
time.sleep(120)
"""
BY_API = """\
import sys
import ringtrain
from ringtrain.errors import JobFailed
try:
    result = ringtrain.run("sleepy.py", hosts="localhost:2", runs_dir="runs")
except JobFailed as err:
    print("RAISED", err.exit_code, repr(err.message), repr(err.hint), flush=True)
    sys.exit(err.exit_code)
print("RETURNED", result.state, result.failure, flush=True)
"""


def _wait_ready(runs: Path, proc: subprocess.Popen[str]) -> Path:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(runs.glob("*/attempt-1/rank.*.log"))
        if len(logs) == 2 and all("ready" in log.read_text() for log in logs):
            return logs[0].parents[1]
        time.sleep(0.2)
    raise AssertionError(f"the ranks never started: {proc.communicate(timeout=5)}")


@pytest.mark.parametrize("door", ["api", "cli"])
def test_sigterm_stops_the_job_the_same_through_both_doors(tmp_path: Path, door: str) -> None:
    """SIGTERM to a program inside ringtrain.run() stops the job on every host as it does
    `ringtrain launch`: result.json says interrupted with a clean teardown, events.jsonl has
    the stop, and the program gets the CLI's error text (issue 39 item 2)."""
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    (tmp_path / "by_api.py").write_text(BY_API)
    argv = ([sys.executable, "by_api.py"] if door == "api" else
            [sys.executable, "-m", "ringtrain", "launch", "-H", "localhost:2", "--runs-dir",
             "runs", "sleepy.py"])
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        run_dir = _wait_ready(tmp_path / "runs", proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, (out, err)
    said = out if door == "api" else err
    assert "job interrupted after" in said and "stopped on every host" in said, (out, err)
    if door == "api":
        assert "RAISED 143" in out
    result = json.loads((run_dir / "result.json").read_text())
    attempt = result["attempts"][-1] if "attempts" in result else result
    assert attempt["state"] == "interrupted"
    assert attempt["teardown"] and all(not t["left"] and t["error"] is None
                                       for t in attempt["teardown"]), attempt
    messages = [json.loads(line)["message"]
                for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert "SIGTERM: stopping the job on every host" in messages
    assert any(m.startswith("attempt 1: 2 ranks") for m in messages), messages


def test_a_failed_job_raises_the_clis_error_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One error text for a failed job through both doors: the root cause, then what
    ringtrain did; the CLI prints the same lines."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text(BROKEN)
    with pytest.raises(JobFailed) as info:
        ringtrain.run("broken.py", hosts="localhost:2", runs_dir="runs", check=True)
    cli = subprocess.run([sys.executable, "-m", "ringtrain", "launch", "-H", "localhost:2",
                          "--runs-dir", "runs", "broken.py"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert cli.returncode == info.value.exit_code == 1
    first, *rest = info.value.message.splitlines()
    assert first.startswith("rank 1 on localhost failed (exit code 1)")
    assert rest, "what ringtrain did is part of the error"
    for line in (first, *rest):
        assert _no_ids(line) in _no_ids(cli.stderr), (line, cli.stderr[-2000:])


def _no_ids(text: str) -> str:
    """Run ids, run directories and times differ between two runs."""
    text = re.sub(r"runs/[\w.-]+", "runs/ID", text)
    return re.sub(r"\d+(\.\d+)? s\b", "N s", text)
