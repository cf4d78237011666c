"""A Slurm job preempted with SIGUSR1 commits at once, requeues and resumes from that commit.

`ringtrain slurm submit --requeue` renders ``--signal=B:USR1@120 --requeue --open-mode=append``;
the test sends the signal the way Slurm does ahead of a preemption or the time limit, to the
batch shell (``scancel --signal=USR1 --batch``), which exec'd ``ringtrain launch``. Real Slurm
requeues the job (``scontrol requeue``); its second run starts a new ringtrain run that resumes
from the step rank 0 committed on the signal.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain.sim import slurm as slurm_sim
from tests.integration.slurm_fixture import job_env, job_state, slurm_cluster, wait_job

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.mpi]
__all__ = ["slurm_cluster"]
DIGITS = Path(__file__).resolve().parents[2] / "ringtrain" / "models" / "digits.py"


def test_sigusr1_commits_requeues_and_resumes_from_that_step(slurm_cluster: slurm_sim.SlurmSim,
                                                              tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    argv = [sys.executable, "-m", "ringtrain", "slurm", "submit", "--workdir", str(tmp_path),
            "--job-name", "pre", "--requeue", "--nodes", "1", "--ntasks-per-node", "2",
            f"--launch-arg=--runs-dir={tmp_path / 'runs'}", "--launch-arg=--no-probe",
            f"--launch-arg=--checkpoint=file://{ckpt}", str(DIGITS), "--epochs", "8"]
    done = subprocess.run(argv, capture_output=True, text=True, env=job_env(slurm_cluster),
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    script = (tmp_path / "pre.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --requeue" in script
    out = tmp_path / f"pre-{job_id}.out"
    deadline = time.monotonic() + 240
    while not (out.exists() and "checkpoint: committed epoch 2 " in out.read_text()):
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        assert job_state(slurm_cluster, job_id) in ("PENDING", "RUNNING", "CONFIGURING")
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=slurm_cluster.environ(),
                   check=True, timeout=30)
    state = wait_job(slurm_cluster, job_id, timeout=400)
    text = out.read_text()
    assert state == "COMPLETED", text[-6000:]
    assert "SIGUSR1: preemption notice" in text, text[-6000:]
    committed = re.search(r"preempted \(SIGUSR1\): rank 0 committed step (\d+)", text)
    assert committed, text[-6000:]
    assert f"requeueing Slurm job {job_id}: it resumes from file://{ckpt}" in text
    resumed = re.search(r"ringtrain: resumed from epoch (\d+) step (\d+)", text)
    assert resumed and resumed.group(2) == committed.group(1), text[-6000:]
    assert text.index(committed.group(0)) < text.index(resumed.group(0))
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, env=slurm_cluster.environ(), check=True, timeout=30)
    assert "Restarts=1" in shown.stdout, shown.stdout
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2  # one ringtrain run per run of the Slurm job
    assert '"stop_reason": "preempted (SIGUSR1)' in (runs[0] / "result.json").read_text()
