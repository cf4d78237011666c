"""ringtrain.run(...): the Python API runs the same spec and Session as `ringtrain launch`."""

from __future__ import annotations

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
