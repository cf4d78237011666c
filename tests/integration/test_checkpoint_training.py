"""Training with checkpoints: kill a 2-rank digits job mid-run, relaunch, compare with a clean run.

Checkpoints go to the real S3 server (credentials reach the ranks through the standard AWS
variables that ringtrain forwards by name). One uninterrupted run is shared by the tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringtrain.checkpoint import list_checkpoints, open_store
from ringtrain.sim.s3server import S3Server
from tests.integration import s3_fixture
from tests.integration.procs import results_by_rank
from tests.integration.s3_fixture import client_env, needs_weed

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "ringtrain" / "models" / "digits.py"
RINGTRAIN = [sys.executable, "-m", "ringtrain"]
EPOCHS = 6
STEPS_PER_EPOCH = 23  # 1437 training images, 2 ranks, batch 32

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.s3, needs_weed]
s3_server = s3_fixture.s3_server


@dataclass(frozen=True)
class Run:
    proc: subprocess.CompletedProcess[str]
    results: dict[int, dict[str, object]]
    run_dir: Path


def launch(tmp: Path, env: dict[str, str], *args: str) -> Run:
    runs = tmp / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    proc = subprocess.run(
        [*RINGTRAIN, "launch", "--runs-dir", str(runs), "-H", "localhost:2", *args],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    results = results_by_rank(proc.stdout)
    (run_dir,) = set(runs.iterdir()) - before
    return Run(proc, results, run_dir)


def _log(run: Run) -> str:
    return run.proc.stdout[-3000:] + run.proc.stderr[-3000:]


@pytest.fixture(scope="module")
def env(s3_server: S3Server) -> dict[str, str]:
    return {**client_env(s3_server, dict(os.environ)), "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Run:
    """Uninterrupted, no --checkpoint: checkpoints go to RUN_DIR/checkpoints by default."""
    tmp = tmp_path_factory.mktemp("clean")
    run = launch(tmp, env, str(DIGITS), "--epochs", str(EPOCHS))
    assert run.proc.returncode == 0, _log(run)
    return run


def test_killed_job_resumes_from_the_last_commit_and_reaches_the_same_accuracy(
    tmp_path: Path, env: dict[str, str], s3_server: S3Server, clean_run: Run
) -> None:
    url = s3_server.url(f"digits-{tmp_path.name}")
    first = launch(tmp_path, env, "--checkpoint", url, str(DIGITS), "--epochs", str(EPOCHS),
                   "--fail-at-epoch", "4")
    assert first.proc.returncode == 1, _log(first)
    assert "fault injection: exiting at epoch 4" in first.proc.stdout
    assert not first.results
    store = open_store(url, options=s3_server.client_options())
    committed = list_checkpoints(store, deep=True)
    assert [(c.step, c.ok) for c in committed] == [(69, True), (46, True), (23, True)]
    assert committed[0].manifest is not None and committed[0].manifest.epoch == 3

    second = launch(tmp_path, env, "--checkpoint", url, str(DIGITS), "--epochs", str(EPOCHS))
    assert second.proc.returncode == 0, _log(second)
    assert "resumed from epoch 3 step 69" in second.proc.stdout
    assert "Epoch 4/6" in second.proc.stdout and "Epoch 1/6" not in second.proc.stdout
    r0, r1 = second.results[0], second.results[1]
    assert r0["resumed_from"] == r1["resumed_from"] == {"epoch": 3, "step": 69}
    # same number of optimizer steps as the uninterrupted run: resumed at the right step
    assert r0["steps"] == r1["steps"] == clean_run.results[0]["steps"] == EPOCHS * STEPS_PER_EPOCH
    # identical weights on both ranks after resume (restored + broadcast)
    assert r0["test_loss"] == pytest.approx(r1["test_loss"], rel=1e-6)
    clean_acc = float(clean_run.results[0]["test_accuracy"])  # type: ignore[arg-type]
    resumed_acc = float(r0["test_accuracy"])  # type: ignore[arg-type]
    assert resumed_acc > 0.93 and clean_acc > 0.93
    assert abs(resumed_acc - clean_acc) < 0.03, (resumed_acc, clean_acc)
    assert [c.step for c in list_checkpoints(store)] == [138, 115, 92]  # --keep 3
    assert s3_server.secret_key not in first.proc.stdout + second.proc.stdout + second.proc.stderr


def test_default_checkpoints_live_in_the_run_dir(clean_run: Run) -> None:
    assert clean_run.results[0]["resumed_from"] is None
    ckpt = clean_run.run_dir / "checkpoints"
    manifests = sorted(p.name for p in (ckpt / "manifests").iterdir())
    assert manifests == [f"ckpt-{s:012d}.json" for s in (92, 115, 138)]
    proc = subprocess.run([*RINGTRAIN, "ckpt", "verify", str(ckpt)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "resume: step 138 (epoch 6)" in proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tensorboard(clean_run: Run) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = _free_port()
    proc = subprocess.Popen(
        [*RINGTRAIN, "tensorboard", "--runs-dir", str(clean_run.run_dir.parent), "--port",
         str(port), clean_run.run_dir.name],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield proc, port
    finally:
        proc.kill()  # by PID: exec kept the PID
        proc.wait(10)


def test_tensorboard_serves_rank0_logs(clean_run: Run, tensorboard: tuple[object, int]) -> None:
    assert list((clean_run.run_dir / "tensorboard" / "train").glob("events.out.tfevents.*"))
    _, port = tensorboard
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as r:
                runs = json.loads(r.read())
            if runs:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "tensorboard did not serve in 60 s"
        time.sleep(0.5)
    assert "train" in runs
