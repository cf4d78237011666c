"""Supervision with real mpirun ranks on local slots: detection, teardown, restart, dead-man switch.

Each test checks the exit code, how fast the fault was handled, and that no process of the job is
left: the reaper (the same code ringtrain uses) must find nothing with the run's id afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ringtrain.rank import reaper
from tests.integration.procs import (
    describe,
    killed_on_failure,
    parse_results,
    run_result,
    wait_for_descendants,
)

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
RINGTRAIN = [sys.executable, "-m", "ringtrain"]

PRELUDE = """\
import os, sys, time
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("HOROVOD_RANK", "0")))
attempt = int(os.environ.get("RINGTRAIN_ATTEMPT", "1"))
def hvd_init():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import horovod.tensorflow as hvd
    hvd.init()
    return hvd
"""


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(PRELUDE + body)
    return path


def _launch(tmp_path: Path, script: Path, *args: str, timeout: float = 120):
    started = time.monotonic()
    proc = subprocess.run(
        [
            *RINGTRAIN,
            "launch",
            "--runs-dir",
            str(tmp_path / "runs"),
            "-H",
            "localhost:2",
            *args,
            str(script),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc, time.monotonic() - started


def _assert_nothing_left(result: dict) -> None:
    assert reaper.find(result["run_id"], {}) == []
    for host in result["teardown"]:
        assert host["left"] == [] and host["error"] is None, host


def test_kill_9_of_a_rank_ends_job_fast_and_clean(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
hvd = hvd_init()
if rank == 1:
    time.sleep(2)
    os.kill(os.getpid(), 9)
while True:
    import tensorflow as tf; hvd.allreduce(tf.constant([1.0])); time.sleep(0.05)
""",
    )
    # a killed rank makes its host suspect; with one host the restart keeps it (avoiding it
    # would leave no slot), and the second attempt, killed again, ends the run
    proc, _ = _launch(tmp_path, script, "--max-restarts", "1")
    result = run_result(tmp_path)
    assert proc.returncode == 137, proc.stderr[-2000:]
    assert result["failed_rank"] == 1 and result["signal"] == "SIGKILL"
    assert "rank 1 on localhost failed (signal SIGKILL)" in proc.stderr
    assert [a["state"] for a in result["attempts"]] == ["failed", "failed"]
    assert "keeping localhost: a rank there was killed by a signal" in proc.stderr
    assert result["stop_reason"] is None
    assert result["teardown_s"] < 20  # typical: under 1 s; timings are in bench/launcher/faults.py
    _assert_nothing_left(result)


def test_rank_hanging_before_init_is_named(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
if rank == 1:
    time.sleep(600)
hvd_init()
time.sleep(600)
""",
    )
    proc, elapsed = _launch(tmp_path, script, "--start-timeout", "12")
    result = run_result(tmp_path)
    assert proc.returncode == 20  # docs/ELASTIC.md: one exit status per detected fault
    assert result["fault_kind"] == "start-timeout" and result["failed_rank"] == 1
    assert "ranks 1 on localhost have not reached hvd.init()" in proc.stderr
    assert elapsed < 12 + 60  # start timeout + generous teardown: not hung
    _assert_nothing_left(result)


def test_stall_after_progress_is_detected(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
hvd_init()
from ringtrain.rank import progress
progress.report(epoch=1, step=5, loss=0.5)
time.sleep(600)
""",
    )
    proc, elapsed = _launch(tmp_path, script, "--stall-timeout", "4")
    result = run_result(tmp_path)
    assert result["fault_kind"] == "stall", proc.stderr[-2000:]
    assert proc.returncode == 23
    assert "no training progress for" in proc.stderr and elapsed < 90  # not hung
    _assert_nothing_left(result)


def test_a_stopped_rank_is_named_within_the_heartbeat_bound(tmp_path: Path) -> None:
    """SIGSTOP: the process exists and its host answers, but the rank says nothing."""
    script = _script(
        tmp_path,
        """
import signal
hvd_init()
if rank == 1:
    print("pid", os.getpid(), flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(600)
""",
    )
    started = time.time()  # detected_at is wall-clock time
    proc, _ = _launch(tmp_path, script, "--heartbeat-timeout", "3")
    result = run_result(tmp_path)
    assert proc.returncode == 22, proc.stderr[-2000:]
    assert result["fault_kind"] == "rank-silent" and result["failed_rank"] == 1
    pid = next(line.split()[-1] for line in proc.stdout.splitlines() if "pid" in line)
    assert f"rank 1 on localhost (pid {pid}) silent for" in proc.stderr
    assert result["detected_at"] - started < 3 + 40  # the heartbeat bound, not the stall's
    _assert_nothing_left(result)


def test_restart_after_failure_succeeds_on_second_attempt(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
hvd_init()
if attempt == 1 and rank == 1:
    raise RuntimeError("transient failure")
print("finished attempt", attempt, flush=True)
""",
    )
    proc, _ = _launch(tmp_path, script, "--max-restarts", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = run_result(tmp_path)
    assert [a["state"] for a in result["attempts"]] == ["failed", "succeeded"]
    assert "restarting: attempt 2 of 3" in proc.stderr
    _assert_nothing_left(result)


def test_launcher_killed_ranks_end_themselves(tmp_path: Path) -> None:
    """kill -9 of ringtrain itself: nobody is left to tear down, the ranks' dead-man switch is."""
    script = _script(tmp_path, "hvd_init()\nopen(f'inited.{rank}', 'w').close()\n"
                     "time.sleep(600)\n")
    proc = subprocess.Popen(
        [
            *RINGTRAIN,
            "launch",
            "--runs-dir",
            str(tmp_path / "runs"),
            "-H",
            "localhost:2",
            "--heartbeat-timeout",
            "3",
            str(script),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with killed_on_failure(proc):
        wait_for_descendants(proc.pid, "job.py", 2)
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"inited.{r}").exists() for r in (0, 1)):  # past hvd.init
            assert time.monotonic() < deadline, "hvd.init did not finish on both ranks"
            time.sleep(0.2)
    runs = [*RINGTRAIN, "runs", "--runs-dir", str(tmp_path / "runs"), "--json"]
    listed = json.loads(subprocess.run(runs, capture_output=True, text=True, check=True).stdout)
    assert listed[0]["state"] == "running"
    survivors = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.monotonic()
    _, alive = psutil.wait_procs(survivors, timeout=30)
    assert not alive, describe(alive)
    # the ranks give up heartbeat timeout + 2 s after the launcher went silent
    assert time.monotonic() - killed_at < 25
    # the run history tells what happened instead of "no result"
    listed = json.loads(subprocess.run(runs, capture_output=True, text=True, check=True).stdout)
    assert listed[0]["state"] == "launcher killed"
    show = subprocess.run([*RINGTRAIN, "runs", "--runs-dir", str(tmp_path / "runs"), "show",
                           listed[0]["run_id"]], capture_output=True, text=True, check=True)
    assert "the launcher was killed before it wrote result.json; last event:" in show.stdout


DIGITS = Path(__file__).resolve().parents[2] / "ringtrain" / "models" / "digits.py"


def test_restart_resumes_digits_from_the_committed_checkpoint(tmp_path: Path) -> None:
    """Rank 1 dies at epoch 3 of 5; the restart resumes from the committed epoch 2 and still
    reaches the accuracy of a normal run (digits reaches ~0.95 after 5 epochs on 2 ranks)."""
    argv = [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "-H", "localhost:2",
            "--max-restarts", "1", str(DIGITS), "--epochs", "5", "--fail-at-epoch", "3",
            "--fail-rank", "1"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=400,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = run_result(tmp_path)
    assert [a["state"] for a in result["attempts"]] == ["failed", "succeeded"]
    assert "restarting: attempt 2 of 2 from step" in proc.stderr
    results = parse_results(proc.stdout)
    assert {r["rank"] for r in results} == {0, 1}
    resumed = {json.dumps(r["resumed_from"], sort_keys=True) for r in results}
    assert len(resumed) == 1 and results[0]["resumed_from"] is not None
    assert results[0]["resumed_from"]["epoch"] >= 2
    assert results[0]["test_loss"] == pytest.approx(results[1]["test_loss"], rel=1e-6)
    assert results[0]["test_accuracy"] > 0.9
    assert result["last_checkpoint"]["epoch"] == 5
    # the recovery ledger (issue 24): the incident named as it happens, then timed stage by
    # stage from its detection, in order, with the time to training again
    assert "incident: rank 1 on localhost failed (exit code 1); restarting" in proc.stderr
    (incident,) = result["incidents"]
    stages = [incident["stages_s"][k] for k in ("torn down", "restarted", "ranks arrived",
                                                 "hvd.init done", "training again")]
    assert all(s is not None for s in stages) and stages == sorted(stages), incident
    assert incident["ttta_s"] == stages[-1] and incident["resumed_step"] is not None
    assert "recovery: after attempt 1: rank 1 on localhost failed (exit code 1)" in proc.stderr
    _assert_nothing_left(result)


def test_a_crash_loop_stops_after_three_restarts_without_a_commit(tmp_path: Path) -> None:
    """A script that fails at every start, --max-restarts 6: ringtrain restarts three times,
    sees no checkpoint committed, and stops with a report that says so (issue 24)."""
    (tmp_path / "crash.py").write_text("raise SystemExit('config error: no such dataset')\n")
    argv = [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "-H", "localhost:1",
            "--max-restarts", "6", "crash.py"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = run_result(tmp_path)
    assert len(result["attempts"]) == 4  # the first and three restarts, not seven
    assert result["attempts"][-1]["decision"].startswith("crash loop: 3 restarts in a row")
    assert "crash loop: 3 restarts in a row and no new checkpoint committed (none yet)" in (
        proc.stderr)
    shown = subprocess.run([*RINGTRAIN, "runs", "--runs-dir", str(tmp_path / "runs"), "show",
                            result["run_id"]], capture_output=True, text=True, check=True,
                           timeout=60).stdout
    assert "then: restarting: attempt 2 of 7" in shown and "crash loop" in shown
