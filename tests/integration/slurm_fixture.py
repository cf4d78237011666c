"""``slurm_cluster``: a real Slurm cluster (munged, slurmctld, 4 slurmd with 4 fake GPUs each).

Import the fixture into a test module (``from tests.integration.slurm_fixture import
slurm_cluster``). It is named ``t<pid of this pytest>``, keeps its files under pytest's tmp dir
and is stopped completely at the end of the session; clusters left by killed sessions are
stopped first. Skips with the reason when not root or when the Slurm packages are missing.

Helpers submit batch jobs and wait for them, and find a run's processes by the
``RINGTRAIN_RUN_ID=<id>`` in their environment (as ``ringtrain.rank.reaper`` does).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ringtrain.rank import procfs
from ringtrain.sim import slurm as slurm_sim
from ringtrain.sim.config import RUN_DIR

NODES = 4
GPUS = 4
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED")
# Emulated nodes share this machine's hostname: Open MPI must not use shared memory between them.
JOB_ENV = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo",
           "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}
_STALE_RE = re.compile(r"^slurm-t(\d+)\.state_dir$")


def remove_stale_clusters() -> None:
    """Stop Slurm sims of earlier pytest sessions whose process is gone."""
    if not RUN_DIR.is_dir():
        return
    for entry in RUN_DIR.iterdir():
        m = _STALE_RE.match(entry.name)
        if m is None:
            continue
        pid = int(m.group(1))
        alive = b"pytest" in procfs.read(f"/proc/{pid}/cmdline")
        if not alive:
            state = Path(entry.read_text().strip())
            slurm_sim.slurm_down(slurm_sim.SlurmSimConfig(name=f"t{pid}", state_dir=state))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_sim.SlurmSim]:
    reason = slurm_sim.unavailable()
    if reason:
        pytest.skip(reason)
    remove_stale_clusters()
    # a requeued job waits cred_expire + 1 s to run again: 10 s (Slurm takes 5 or more; a
    # step's credential is checked milliseconds after it is made) instead of the default 20
    cfg = slurm_sim.SlurmSimConfig(name=f"t{os.getpid()}", nodes=NODES, gpus_per_node=GPUS,
                                   state_dir=tmp_path_factory.mktemp("slurm") / "cluster",
                                   cred_expire_s=10)
    cluster = slurm_sim.slurm_up(cfg)
    try:
        yield cluster
    finally:
        slurm_sim.slurm_down(cfg)


def job_env(cluster: slurm_sim.SlurmSim, **extra: str) -> dict[str, str]:
    """The environment to submit with: this process's, the cluster's SLURM_CONF, JOB_ENV."""
    env = cluster.environ({k: v for k, v in os.environ.items()
                           if not k.startswith(("SLURM_", "PBS_"))})
    return {**env, **JOB_ENV, **extra}


def sbatch(cluster: slurm_sim.SlurmSim, args: list[str], env: Mapping[str, str] | None = None,
           cwd: Path | None = None) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                          env=dict(env or job_env(cluster)), cwd=cwd, check=True, timeout=30)
    return done.stdout.strip().split(";")[0]


def job_state(cluster: slurm_sim.SlurmSim, job_id: str) -> str:
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                          text=True, env=cluster.environ(), check=False, timeout=30)
    m = re.search(r"JobState=(\S+)", done.stdout)
    return m.group(1) if m else "UNKNOWN"


def wait_job(cluster: slurm_sim.SlurmSim, job_id: str, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        state = job_state(cluster, job_id)
        if state in TERMINAL:
            return state
        time.sleep(0.5)
    pytest.fail(f"Slurm job {job_id} still {state} after {timeout} s")


def run_processes(run_id: str) -> list[tuple[int, str]]:
    """Processes whose environment holds RINGTRAIN_RUN_ID=<run_id> (any job process)."""
    marker = f"RINGTRAIN_RUN_ID={run_id}".encode()
    return [(pid, procfs.cmdline(pid)) for pid in procfs.pids() if procfs.environ_has(pid, marker)]
