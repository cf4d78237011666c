"""`ringtrain launch` inside real Slurm jobs: sbatch wrapper jobs made by `ringtrain slurm submit`.

The emulated nodes share this machine's hostname, so the jobs run with Open MPI's TCP transport
on loopback (``slurm_fixture.JOB_ENV``), and the training runs pass ``--no-probe``: the
pre-flight probe, which runs on every node as an srun step, rightly refuses two "hosts" with one
hostname (``test_probe_runs_on_every_node_through_srun`` shows exactly that).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain.sim import slurm as slurm_sim
from ringtrain.sim.slurm_procs import job_processes
from tests.integration.procs import parse_results, run_result
from tests.integration.slurm_fixture import (
    job_env,
    job_state,
    run_processes,
    sbatch,
    slurm_cluster,
    wait_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.mpi]
__all__ = ["slurm_cluster"]
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "ringtrain" / "models" / "digits.py"

WHERE = """\
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
print("RANK", c.rank, c.size, os.environ.get("SLURMD_NODENAME"), c.allreduce(c.rank), flush=True)
"""

# what each rank was told: torchrun's names (set by the rank entry) and srun's own
TOLD = """\
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
e = os.environ
told = [e.get(n) for n in ("SLURMD_NODENAME", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                           "SLURM_CPU_BIND_TYPE", "SLURM_MPI_TYPE")]
print("RANK", c.rank, c.size, *told, c.allreduce(1), flush=True)
"""

LOOP = """\
import time
from mpi4py import MPI
c = MPI.COMM_WORLD
step = 0
while True:
    c.allreduce(1)
    step += 1
    if c.rank == 0 and step % 20 == 0:
        print("step", step, flush=True)
    time.sleep(0.05)
"""


def _submit(cluster: slurm_sim.SlurmSim, tmp_path: Path, name: str, script: Path,
            *args: str, script_args: tuple[str, ...] = (), **env: str) -> str:
    argv = [sys.executable, "-m", "ringtrain", "slurm", "submit", "--workdir", str(tmp_path),
            "--job-name", name, f"--launch-arg=--runs-dir={tmp_path / 'runs'}", *args,
            str(script), *script_args]
    done = subprocess.run(argv, capture_output=True, text=True, env=job_env(cluster, **env),
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert job_id.isdigit(), done.stdout
    return job_id


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(text)
    return path


def test_wrapper_job_trains_digits_on_2_nodes_x_2_tasks(slurm_cluster: slurm_sim.SlurmSim,
                                                         tmp_path: Path) -> None:
    job_id = _submit(slurm_cluster, tmp_path, "digits", DIGITS, "--nodes", "2",
                     "--ntasks-per-node", "2", "--gpus-per-node", "2", "--launch-arg=--no-probe",
                     script_args=("--epochs", "2"))
    state = wait_job(slurm_cluster, job_id, timeout=400)
    out = (tmp_path / f"digits-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    assert f"inside slurm job {job_id}: 2 node(s), 4 slots" in out
    results = parse_results(out)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert {r["size"] for r in results} == {4}
    assert len({round(r["test_accuracy"], 6) for r in results}) == 1  # one model on all ranks
    result = run_result(tmp_path)
    assert result["state"] == "succeeded" and result["np"] is None
    plan = json.loads(next((tmp_path / "runs").glob("*/attempt-1/plan.json")).read_text())
    assert plan["backend"] == "srun" and plan["argv"][0] == "srun"
    assert [h["name"] for h in plan["hosts"]] == ["gpu01", "gpu02"]
    assert not run_processes(plan["run_id"])


def test_scancel_mid_job_tears_everything_down(slurm_cluster: slurm_sim.SlurmSim,
                                               tmp_path: Path) -> None:
    job_id = _submit(slurm_cluster, tmp_path, "loop", _script(tmp_path, LOOP), "--nodes", "2",
                     "--ntasks-per-node", "2", "--launch-arg=--no-probe")
    out = tmp_path / f"loop-{job_id}.out"
    deadline = time.monotonic() + 120
    while not (out.exists() and "step 20" in out.read_text()):
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.3)
    (run_dir,) = (tmp_path / "runs").iterdir()
    running = run_processes(run_dir.name)
    ranks = [c for _, c in running if "ringtrain.rank.entry" in c and not c.startswith("srun")]
    assert len(ranks) == 4, running
    subprocess.run(["scancel", job_id], env=slurm_cluster.environ(), check=True, timeout=30)
    deadline = time.monotonic() + 20
    while run_processes(run_dir.name) or job_processes(slurm_cluster.state_dir):
        assert time.monotonic() < deadline, (run_processes(run_dir.name),
                                             job_processes(slurm_cluster.state_dir))
        time.sleep(0.2)
    assert wait_job(slurm_cluster, job_id, timeout=30) == "CANCELLED"
    assert "SIGTERM: stopping the job on every host" in out.read_text()


def test_probe_runs_on_every_node_through_srun(slurm_cluster: slurm_sim.SlurmSim,
                                               tmp_path: Path) -> None:
    """No SSH inside the job: each node answers the probe from an srun step, so gpu02 reports
    the hostname it shares with gpu01; excluding it, the job runs on gpu01 alone."""
    job_id = _submit(slurm_cluster, tmp_path, "probe", _script(tmp_path, WHERE), "--nodes", "2",
                     "--ntasks-per-node", "2", "--launch-arg=--on-bad-host=exclude")
    state = wait_job(slurm_cluster, job_id, timeout=120)
    out = (tmp_path / f"probe-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    assert "reports the same hostname" in out and "as gpu01" in out
    ranks = sorted(line.split("RANK ", 1)[1] for line in out.splitlines() if "RANK " in line)
    assert ranks == ["0 2 gpu01 1", "1 2 gpu01 1"]


def test_mpirun_backend_inside_the_allocation(slurm_cluster: slurm_sim.SlurmSim,
                                              tmp_path: Path) -> None:
    """--backend mpirun inside the job: Open MPI takes the nodes from the allocation. One node:
    across emulated nodes Open MPI's fixed ``-mca btl ^openib`` would pick shared memory."""
    job_id = _submit(slurm_cluster, tmp_path, "mpirun", _script(tmp_path, WHERE), "--nodes", "1",
                     "--ntasks-per-node", "3", "--launch-arg=--no-probe",
                     "--launch-arg=--backend=mpirun")
    state = wait_job(slurm_cluster, job_id, timeout=120)
    out = (tmp_path / f"mpirun-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    ranks = sorted(line.split("RANK ", 1)[1] for line in out.splitlines() if "RANK " in line)
    assert ranks == ["0 3 gpu01 3", "1 3 gpu01 3", "2 3 gpu01 3"]
    assert job_state(slurm_cluster, job_id) == "COMPLETED"


def test_uneven_tasks_per_node_place_ranks_as_slurm_did(slurm_cluster: slurm_sim.SlurmSim,
                                                         tmp_path: Path) -> None:
    """sbatch --nodes 2 --ntasks 3: SLURM_TASKS_PER_NODE=2,1 (not expressible with
    `ringtrain slurm submit`, which asks for tasks per node); srun places 2 ranks on gpu01 and
    1 on gpu02, the way ringtrain read the allocation; each rank's LOCAL_WORLD_SIZE is its
    node's count."""
    where = _script(tmp_path, TOLD)
    batch = tmp_path / "uneven.sh"
    batch.write_text(
        "#!/bin/bash\n"
        f"exec {sys.executable} -m ringtrain launch --no-probe --runs-dir {tmp_path / 'runs'} "
        f"{where}\n"
    )
    job_id = sbatch(slurm_cluster, ["--nodes", "2", "--ntasks", "3", "-o",
                                    str(tmp_path / "uneven-%j.out"), str(batch)], cwd=tmp_path)
    state = wait_job(slurm_cluster, job_id, timeout=120)
    out = (tmp_path / f"uneven-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    assert "SLURM_TASKS_PER_NODE=2,1" in out, out
    ranks = sorted(line.split("RANK ", 1)[1] for line in out.splitlines() if "RANK " in line)
    assert ranks == ["0 3 gpu01 0 2 None pmix 3", "1 3 gpu01 1 2 None pmix 3",
                     "2 3 gpu02 0 1 None pmix 3"], out


def test_the_users_sbatch_and_srun_options_are_in_force(slurm_cluster: slurm_sim.SlurmSim,
                                                        tmp_path: Path) -> None:
    """slurm submit's --exclusive --mem --sbatch-arg reach the job, launch's --srun-args the
    step (srun's --cpu-bind=none: SLURM_CPU_BIND_TYPE in every rank), and SLURM_MPI_TYPE in
    the submitting shell picks srun's MPI plugin (pmix_v4, not ringtrain's default pmix)."""
    job_id = _submit(slurm_cluster, tmp_path, "opts", _script(tmp_path, TOLD), "--nodes", "2",
                     "--ntasks-per-node", "2", "--exclusive", "--mem", "1",
                     "--sbatch-arg=--comment=ringtrain-opts", "--launch-arg=--no-probe",
                     "--launch-arg=--srun-args=--cpu-bind=none", SLURM_MPI_TYPE="pmix_v4")
    state = wait_job(slurm_cluster, job_id, timeout=120)
    out = (tmp_path / f"opts-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    ranks = sorted(line.split("RANK ", 1)[1] for line in out.splitlines() if "RANK " in line)
    assert ranks == [f"{r} 4 gpu0{r // 2 + 1} {r % 2} 2 none pmix_v4 4" for r in range(4)], out
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                           env=slurm_cluster.environ(), check=True, timeout=30).stdout
    assert "Comment=ringtrain-opts" in shown and "OverSubscribe=NO" in shown
    assert "MinMemoryNode=1M" in shown, shown
    plan = json.loads(next((tmp_path / "runs").glob("*/attempt-1/plan.json")).read_text())
    assert plan["argv"][:2] == ["srun", "--mpi=pmix_v4"] and "--cpu-bind=none" in plan["argv"]


def test_tf_multiworker_under_srun_gives_each_slurm_task_its_tf_config(
        slurm_cluster: slurm_sim.SlurmSim, tmp_path: Path) -> None:
    """--strategy tf-multiworker in a wrapper job: srun starts the tasks, and Slurm's task r
    gets TF_CONFIG task r. A script from TensorFlow's tutorial trains on both. One node: the
    emulated nodes share this machine, so two of them would both listen on --tf-port."""
    script = REPO / "tests" / "integration" / "user_scripts" / "mwms_keras_style.py"
    job_id = _submit(slurm_cluster, tmp_path, "mwms", script, "--nodes", "1",
                     "--ntasks-per-node", "2", "--launch-arg=--no-probe",
                     "--launch-arg=--strategy=tf-multiworker", script_args=("3",))
    state = wait_job(slurm_cluster, job_id, timeout=300)
    out = (tmp_path / f"mwms-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines()
               if "RESULT {" in line]
    assert sorted(r["task"]["index"] for r in results) == [0, 1], out
    assert {r["workers"] for r in results} == {2}
    assert len({r["weights"] for r in results}) == 1  # one model on both workers
    plan = json.loads(next((tmp_path / "runs").glob("*/attempt-1/plan.json")).read_text())
    assert plan["backend"] == "srun" and plan["argv"][0] == "srun"
    assert run_result(tmp_path)["state"] == "succeeded"
    assert not run_processes(plan["run_id"])


# each rank: what it found in its environment, and what the srun that started the step holds
# (the emulated nodes share this machine, so its /proc shows that srun: argv and environment)
SECRETS_SEEN = """\
import hashlib, os
from mpi4py import MPI
c = MPI.COMM_WORLD
e = os.environ
def digest(name):
    return hashlib.sha256(e[name].encode()).hexdigest() if name in e else "-"
values = [e[n].encode() for n in ("PROBE_VALUE", "LAUNCHER_PASSWORD", "RINGTRAIN_CONTROL_TOKEN")
          if n in e]
sruns, leaked = 0, []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\\0")
        if os.path.basename(argv[0]) != b"srun" or b"ringtrain.rank.entry" not in argv:
            continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            held = f.read() + b"\\0".join(argv)
    except OSError:
        continue
    sruns += 1
    leaked += [i for i, v in enumerate(values) if v in held]
print("SEEN", c.rank, digest("PROBE_VALUE"), digest("LAUNCHER_PASSWORD"),
      bool(e.get("RINGTRAIN_CONTROL_TOKEN")), digest("AWS_SECRET_ACCESS_KEY"), e.get("SHOWN"),
      sruns, leaked, flush=True)
"""


def test_srun_carries_no_secret_the_file_does(slurm_cluster: slurm_sim.SlurmSim,
                                              tmp_path: Path) -> None:
    """Issue 40: srun ships its whole environment (--export=ALL) to each node's slurmd. The
    control token, an --env value (forwarded by a name nothing would guess) and a secret of
    the launcher's environment reach the ranks by the 0600 file, written on each node by an
    srun step with the values on its stdin: the srun that starts the ranks holds none of them
    in its argv or environment, every rank holds them all. The launcher's AWS key reaches no
    rank (no checkpoint on S3); --env-plain's value is in the environment as it was."""
    value, password, aws = secrets.token_hex(16), secrets.token_hex(12), secrets.token_hex(20)
    job_id = _submit(slurm_cluster, tmp_path, "secrets", _script(tmp_path, SECRETS_SEEN),
                     "--nodes", "2", "--ntasks-per-node", "1", "--launch-arg=--no-probe",
                     "--launch-arg=--env=PROBE_VALUE", "--launch-arg=--env-plain=SHOWN=yes",
                     PROBE_VALUE=value, LAUNCHER_PASSWORD=password, AWS_SECRET_ACCESS_KEY=aws)
    state = wait_job(slurm_cluster, job_id, timeout=180)
    out = (tmp_path / f"secrets-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    seen = sorted(line.split("SEEN ", 1)[1] for line in out.splitlines() if "SEEN " in line)
    sha = [hashlib.sha256(v.encode()).hexdigest() for v in (value, password)]
    # srun found (else the scan proves nothing; it runs as two processes), no value in it
    assert [line.split()[:6] for line in seen] == [
        [str(r), sha[0], sha[1], "True", "-", "yes"] for r in (0, 1)], out
    assert all(int(line.split()[6]) >= 1 and line.endswith(" []") for line in seen), out
    assert value not in out and password not in out and aws not in out
    plan = json.loads(next((tmp_path / "runs").glob("*/attempt-1/plan.json")).read_text())
    assert plan["backend"] == "srun"
    assert {"PROBE_VALUE", "LAUNCHER_PASSWORD", "RINGTRAIN_CONTROL_TOKEN"} <= set(
        plan["secrets_by_file"])
    assert "AWS_SECRET_ACCESS_KEY" in plan["withheld"]
    assert run_result(tmp_path)["state"] == "succeeded"
    run_id = plan["run_id"]
    assert not list((Path.home() / ".ringtrain" / "secrets").glob(f"{run_id}-*"))  # reaped
