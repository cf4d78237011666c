"""The Slurm sim itself, and ringtrain's reading of Slurm job environments checked against Slurm.

The oracle jobs run on the live cluster and record what Slurm says: ``scontrol show hostnames``
for the node list, one ``srun`` task per job task for the slots of each node, and each node's
CUDA_VISIBLE_DEVICES for its GPUs. ``slurm_job`` must agree with all three.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ringtrain.rank import procfs
from ringtrain.schedulers.jobenv import slurm_job
from ringtrain.sim import slurm as slurm_sim
from ringtrain.sim.slurm_procs import job_processes, same_process
from tests.integration.slurm_fixture import (
    job_env,
    job_state,
    sbatch,
    slurm_cluster,
    wait_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
__all__ = ["slurm_cluster"]

ORACLE = f"""#!{sys.executable}
import json, os, subprocess
env = {{k: v for k, v in os.environ.items() if k.startswith("SLURM_")}}
def out(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout
tasks = out("srun", "--overlap", "bash", "-c", "echo $SLURMD_NODENAME").split()
gpus = out("srun", "--overlap", "--ntasks-per-node=1", "--nodes", env["SLURM_JOB_NUM_NODES"],
           "bash", "-c", "echo $SLURMD_NODENAME ${{CUDA_VISIBLE_DEVICES:-}}").splitlines()
record = dict(
    env=env,
    hostnames=out("scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]).split(),
    tasks=tasks,
    gpus={{line.split()[0]: line.split()[1:] for line in gpus}},
    detail=out("scontrol", "show", "job", "-d", env["SLURM_JOB_ID"]),
)
with open(os.environ["ORACLE_OUT"] + "/" + env["SLURM_JOB_ID"] + ".json", "w") as fh:
    json.dump(record, fh)
"""

VARIANTS = [
    ["-N2", "--ntasks-per-node=2", "--gpus-per-node=2"],
    ["-N3", "-n7"],
    ["-w", "gpu[01,03-04]", "-n3"],
    ["-N4", "-n10", "--gpus-per-node=1"],
    ["-w", "gpu02,gpu04", "--ntasks-per-node=3", "--gpus-per-node=4"],
    ["-N2", "--gpus=3"],
    ["-n1"],
]


def test_cluster_is_up_with_gpu_gres(slurm_cluster: slurm_sim.SlurmSim) -> None:
    again = slurm_sim.slurm_up(slurm_cluster.config)  # idempotent: the same daemons
    assert again.pids == slurm_cluster.pids
    env = slurm_cluster.environ()
    sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t %G"], capture_output=True,
                           text=True, env=env, check=True).stdout.split("\n")
    assert sorted(line for line in sinfo if line) == [
        f"gpu0{i} idle gpu:4" for i in range(1, 5)
    ]


def test_job_environments_agree_with_slurm(slurm_cluster: slurm_sim.SlurmSim,
                                           tmp_path: Path) -> None:
    script = tmp_path / "oracle.py"
    script.write_text(ORACLE)
    script.chmod(0o755)
    env = job_env(slurm_cluster, ORACLE_OUT=str(tmp_path))
    jobs = [sbatch(slurm_cluster, [*v, "-o", str(tmp_path / "%j.out"), str(script)], env)
            for v in VARIANTS]
    states = {j: wait_job(slurm_cluster, j, timeout=120) for j in jobs}
    assert set(states.values()) == {"COMPLETED"}, {
        j: (tmp_path / f"{j}.out").read_text() for j in jobs
    }
    forms = []
    for job_id, variant in zip(jobs, VARIANTS, strict=True):
        record = json.loads((tmp_path / f"{job_id}.json").read_text())
        forms.append(record["env"]["SLURM_TASKS_PER_NODE"])
        job = slurm_job(record["env"], record["detail"])
        hosts = job.inventory.hosts
        assert [h.name for h in hosts] == record["hostnames"], variant
        assert {h.name: h.slots for h in hosts} == dict(Counter(record["tasks"])), variant
        gpus = {h.name: int(h.label("gpus") or 0) for h in hosts}
        if "--gpus=3" in variant:  # a job-wide count: split unevenly between the nodes
            assert sum(gpus.values()) == 3 and min(gpus.values()) >= 1
        else:
            assert gpus == {n: len(v[0].split(",")) if v else 0
                            for n, v in record["gpus"].items()}, variant
    assert any("(x" in f for f in forms) and any("," in f for f in forms), forms


def test_down_stops_daemons_and_jobs(tmp_path: Path) -> None:
    """A second, one-node cluster with a running job: down leaves nothing of it behind."""
    cfg = slurm_sim.SlurmSimConfig(name=f"t{os.getpid()}d", nodes=1, gpus_per_node=1,
                                   state_dir=tmp_path / "c")
    cluster = slurm_sim.slurm_up(cfg)
    try:
        job_id = sbatch(cluster, ["-o", "/dev/null", "--wrap", "sleep 300"], cluster.environ())
        deadline = time.monotonic() + 30
        while not any("sleep" in procfs.cmdline(p) for p in job_processes(cluster.state_dir)):
            assert time.monotonic() < deadline, job_state(cluster, job_id)
            time.sleep(0.2)
        assert len(job_processes(cluster.state_dir)) >= 2  # slurmstepd, the job's shell, sleep
    finally:
        slurm_sim.slurm_down(cfg)
    assert not job_processes(cluster.state_dir)
    assert not [name for name, pid, start in cluster.pids if same_process(pid, start)]
    assert slurm_sim.load(cfg) is None


def test_cli_status_and_submit_against_the_cluster(slurm_cluster: slurm_sim.SlurmSim,
                                                   tmp_path: Path) -> None:
    cfg = slurm_cluster.config
    base = [sys.executable, "-m", "ringtrain", "slurm"]
    where = ["--name", cfg.name, "--state-dir", str(slurm_cluster.state_dir)]
    done = subprocess.run([*base, "sim", "status", *where], capture_output=True, text=True,
                          check=True, timeout=60)
    status = json.loads(done.stdout)
    assert sorted(status["nodes"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(status["daemons"].values())
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    done = subprocess.run([*base, "submit", "--workdir", str(tmp_path), "--job-name", "bad",
                           "--partition", "nosuchpartition", str(script)],
                          capture_output=True, text=True, env=job_env(slurm_cluster),
                          timeout=60, check=False)
    assert done.returncode == 7
    assert "invalid partition specified: nosuchpartition" in done.stderr
