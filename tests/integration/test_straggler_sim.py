"""Stragglers during training on the simulated cluster (issue 13, item 3): a user's Keras
script (Horovod's recipe + ringtrain.keras.callbacks()) trains on three hosts; one rank's CPU is
cut to a tenth of a core with a cgroup quota mid-run. The launcher names that host and rank
within a bounded time and nobody before; under ``--on-straggler restart-without`` the job
restarts from its last checkpoint without that host and succeeds. The same holds for a script
written from TensorFlow's MultiWorkerMirrored tutorial under ``--strategy tf-multiworker``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import cpu_quota
from tests.integration.procs import killed_on_failure, results_by_rank
from tests.integration.simnames import G1, G2, G3

sim = pytest.importorskip("ringtrain.sim")

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

SCRIPT = Path(__file__).parent / "user_scripts" / "keras_mnist_style.py"
MWMS_SCRIPT = Path(__file__).parent / "user_scripts" / "mwms_ringtrain_style.py"
HOSTS = f"{G1}:1,{G2}:1,{G3}:1"
WINDOW_S = 10
# Three ranks share this machine's two cores: whichever two share a core for a while are
# really slower (10 s windows measured up to 1.7x on a healthy run), so the tests ask for 2x;
# the rank held to a tenth of a CPU measures 3x and more.
THRESHOLD = 2.0
QUOTA = 0.1
NAMED_WITHIN_S = 60  # the window, reports a second apart, a throttled step: well inside


def _launch(cluster: Any, tmp: Path, epochs: int, *args: str,
            source: Path = SCRIPT) -> subprocess.Popen[str]:
    script = tmp / "train.py"  # a path unique to this test: its rank processes are found by it
    shutil.copy(source, script)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp / "runs"),
         "-H", HOSTS, "--ssh-config", str(cluster.ssh_config),
         "--known-hosts", str(cluster.known_hosts), "--cpu",
         "--straggler-window", str(WINDOW_S), "--straggler-threshold", str(THRESHOLD),
         *args, str(script), str(epochs)],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _events(tmp: Path) -> str:
    logs = list((tmp / "runs").glob("*/events.log"))
    return logs[0].read_text() if logs else ""


def _wait_for(proc: subprocess.Popen[str], what: str, check: Any, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"the job ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s"
        time.sleep(0.5)
    return time.monotonic()


def _result(tmp: Path) -> dict[str, Any]:
    (run_dir,) = (tmp / "runs").iterdir()
    data: dict[str, Any] = json.loads((run_dir / "result.json").read_text())
    return data


@pytest.mark.parametrize("strategy", ["horovod", "tf-multiworker"])
def test_a_rank_slowed_mid_run_is_named_by_host_and_rank_and_nobody_before(
    sim_cluster: Any, tmp_path: Path, strategy: str
) -> None:
    # The job must outlast the healthy windows, the slowdown and its naming. MultiWorkerMirrored
    # runs 64 steps an epoch of 3 workers (Horovod's script: 21); an epoch took 1 s on a quiet
    # machine, so 20 epochs ended inside the healthy windows.
    source = SCRIPT if strategy == "horovod" else MWMS_SCRIPT
    epochs = 60
    proc = _launch(sim_cluster, tmp_path, epochs, "--checkpoint", str(tmp_path / "ckpt"),
                   "--strategy", strategy, source=source)
    with killed_on_failure(proc):
        first = _wait_for(proc, "training progress", lambda: "training:" in _events(tmp_path),
                          240)
        # healthy training for two windows: every rank scored, nobody named
        time.sleep(2 * WINDOW_S + 2)
        assert "straggler" not in _events(tmp_path), _events(tmp_path)
        victim = cpu_quota.find_rank(tmp_path / "train.py", 2)
        assert victim is not None, "rank 2's process not found"
        with cpu_quota.cpu_quota(victim, QUOTA, f"ringtrain-test-{os.getpid()}-straggler"):
            slowed = time.monotonic()
            named = _wait_for(proc, "straggler named",
                              lambda: f"straggler: {G3}: rank 2" in _events(tmp_path),
                              NAMED_WITHIN_S)
            progress = _events(tmp_path).count("training:")
        if strategy == "horovod":
            # the default policy only names it and training goes on; then a preemption notice
            # ends the job now, not 40 epochs later
            _wait_for(proc, "more training after the naming",
                      lambda: _events(tmp_path).count("training:") > progress, 30)
            proc.send_signal(signal.SIGUSR1)
        else:  # the naming is what counts; the rest of its 60 epochs would only cost time
            proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=400)
    if strategy == "horovod":
        assert proc.returncode == 143, err[-3000:]
        assert "preempted (SIGUSR1): rank 0 committed step" in err, err[-3000:]
    else:  # stopped on every host; the straggler is in the result all the same
        assert proc.returncode == 143, err[-3000:]
        assert _result(tmp_path)["attempts"][0]["state"] == "interrupted"
    print(f"healthy {slowed - first:.0f} s, named {named - slowed:.1f} s after the slowdown")
    stragglers = _result(tmp_path)["attempts"][0]["stragglers"]
    assert [(s["host"], s["rank"]) for s in stragglers] == [(G3, 2)], stragglers
    assert stragglers[0]["vs_median"] >= THRESHOLD
    assert f"straggler: {G3}: rank 2 step" in err  # the live view says it too


def test_restart_without_the_straggler_host_resumes_and_succeeds(
    sim_cluster: Any, tmp_path: Path
) -> None:
    proc = _launch(sim_cluster, tmp_path, 24, "--checkpoint", str(tmp_path / "ckpt"),
                   "--on-straggler", "restart-without", "--max-restarts", "1", "--min-np", "2")
    with killed_on_failure(proc):
        _wait_for(proc, "a committed checkpoint",
                  lambda: any((tmp_path / "ckpt" / "manifests").glob("*.json")), 240)
        victim = cpu_quota.find_rank(tmp_path / "train.py", 2)
        assert victim is not None, "rank 2's process not found"
        with cpu_quota.cpu_quota(victim, QUOTA, f"ringtrain-test-{os.getpid()}-restart"):
            _wait_for(proc, "restart", lambda: "restarting" in _events(tmp_path),
                      NAMED_WITHIN_S + 30)
        out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    first, second = _result(tmp_path)["attempts"]
    assert first["fault_kind"] == "straggler" and first["fault_hosts"] == [G3], first
    assert first["exit_code"] == 25
    assert second["state"] == "succeeded"
    final = results_by_rank(out)
    assert set(final) == {0, 1}  # two ranks: gpu03 left out
    assert final[0]["initial_epoch"] >= 1  # resumed from a checkpoint, not started over
    assert final[0]["checksum"] == final[1]["checksum"]
    (run_dir,) = (tmp_path / "runs").iterdir()
    shown = subprocess.run(
        [sys.executable, "-m", "ringtrain", "runs", "--runs-dir", str(tmp_path / "runs"),
         "show", run_dir.name], capture_output=True, text=True, check=True, timeout=60).stdout
    assert f"fault: rank 2 on {G3} is a straggler" in shown
    assert f"straggler: {G3} rank 2:" in shown
