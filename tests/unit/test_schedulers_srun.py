"""The srun backend, the srun-step Remote, and `ringtrain launch --dry-run` inside Slurm / PBS."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.errors import SchedulerError
from ringtrain.hostfile import Host, allocate, parse_slurm_env
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.schedulers.calls import SrunRemote, remote_for, srun_failure
from ringtrain.schedulers.jobenv import slurm_job
from ringtrain.spec import Backend, EnvSpec, LaunchSpec
from tests.golden import assert_golden

FIXTURES = Path(__file__).parent / "golden" / "schedulers"
ENVIRON = {"PATH": "/usr/bin:/bin", "HOROVOD_CYCLE_TIME": "1", "MY_TOKEN": "s3cr3t", "X": "1"}


def _srun_plan(nodelist: str, tasks: str, np: int | None = None):  # type: ignore[no-untyped-def]
    request = LaunchSpec(
        script="train.py", script_args=("--epochs", "2"), np=np, backend=Backend.SRUN,
        working_dir=Path("/work/job"), runs_dir=Path("/work/job/runs"),
        env=(EnvSpec("MY_TOKEN"),),
    )
    alloc = allocate(parse_slurm_env(nodelist, tasks), np)
    inputs = PlanInputs(SessionEnv("R1", ENVIRON, True, "/venv/bin/python"),
                        control_addr="10.0.0.1:4000", control_token="tok")
    return make_plan(request, alloc, inputs)


def test_srun_plan_golden() -> None:
    assert_golden("schedulers/srun_plan_2x2.txt", _srun_plan("gpu[01-02]", "2(x2)").describe()
                  + "\n")


def test_srun_uniform_placement() -> None:
    argv = _srun_plan("gpu[01-02]", "2(x2)").command.argv
    assert argv[:6] == ("srun", "--mpi=pmix", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                        "--nodelist=gpu01,gpu02")
    assert argv[-7:] == ("/venv/bin/python", "-m", "ringtrain.rank.entry", "--mpi",
                         "/work/job/train.py", "--epochs", "2")


def test_srun_uneven_placement_is_arbitrary_in_rank_order() -> None:
    argv = _srun_plan("gpu[01-03]", "3,1(x2)").command.argv
    assert "--distribution=arbitrary" in argv
    assert "--nodelist=gpu01,gpu01,gpu01,gpu02,gpu03" in argv
    argv = _srun_plan("gpu[01-02]", "2(x2)", np=3).command.argv  # fewer ranks than slots
    assert "--nodelist=gpu01,gpu01,gpu02" in argv and "--ntasks=3" in argv


def test_srun_forwards_names_never_values() -> None:
    plan = _srun_plan("gpu[01-02]", "2(x2)")
    export = next(a for a in plan.command.argv if a.startswith("--export="))
    names = export.removeprefix("--export=").split(",")
    assert names[0] == "ALL"
    assert {"RINGTRAIN_CONTROL_ADDR", "RINGTRAIN_ENV_FILE", "PATH",
            "HOROVOD_CYCLE_TIME"} <= set(names)
    joined = " ".join(plan.command.argv)
    assert "s3cr3t" not in joined and "tok" not in joined.replace("TOKEN", "")
    # the secrets by file (issue 40): srun ships its environment to every node's slurmd
    assert dict(plan.command.secrets) == {"RINGTRAIN_CONTROL_TOKEN": "tok", "MY_TOKEN": "s3cr3t"}
    assert {"RINGTRAIN_CONTROL_TOKEN", "MY_TOKEN"} <= set(plan.command.unset)
    assert "RINGTRAIN_CONTROL_TOKEN" not in dict(plan.command.env)


def test_srun_passes_the_chosen_network_by_environment() -> None:
    request = LaunchSpec(script="t.py", backend=Backend.SRUN, working_dir=Path("/w"))
    inputs = PlanInputs(SessionEnv("R", {}, False, "/p"), tcp_include="10.1.0.0/16")
    plan = make_plan(request, allocate(parse_slurm_env("n[1-2]", "1(x2)"), None), inputs)
    assert dict(plan.command.env)["OMPI_MCA_btl_tcp_if_include"] == "10.1.0.0/16"
    assert "10.1.0.0/16" not in plan.command.argv


def test_srun_step_argv() -> None:
    argv = SrunRemote().step_argv("gpu03", ["sh", "-c", "echo hi"], timeout=30)
    assert argv[:6] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=gpu03",
                        "--quiet"]
    assert argv[-4:] == ["--", "sh", "-c", "echo hi"]
    with pytest.raises(SchedulerError):
        SrunRemote().step_argv("-gpu03", ["true"], timeout=30)


def test_srun_remote_reports_a_missing_srun_per_host(tmp_path: Path) -> None:
    remote = SrunRemote(environ={"PATH": str(tmp_path)})
    out = remote.run([Host("gpu01", 1), Host("gpu02", 1)], ["true"], timeout=5)
    assert set(out) == {"gpu01", "gpu02"}
    assert all(r.error and "cannot run srun" in r.error for r in out.values())


def test_srun_remote_passes_data_on_the_steps_stdin(tmp_path: Path) -> None:
    """run_with_input (the secrets file under horovodrun --gloo): srun hands its stdin to the
    step's one task. A stand-in srun runs what follows ``--`` with the same stdin."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    remote = SrunRemote(environ={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out = remote.run_with_input([Host("gpu01", 1), Host("gpu02", 1)], ["cat"], b"v\0\n", 10)
    assert [(r.exit_code, r.stdout) for r in out.values()] == [(0, "v\0\n")] * 2
    assert remote.run([Host("gpu01", 1)], ["cat"], 10)["gpu01"].stdout == ""  # /dev/null


def test_remote_for_slurm_only() -> None:
    job = slurm_job({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "a1", "SLURM_TASKS_PER_NODE": "1"})
    assert isinstance(remote_for(job), SrunRemote)
    assert remote_for(None) is None


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        ("srun: error: gpu01: task 0: Exited with exit code 2\n", None),
        ("srun: error: gpu01: tasks 0-3: Terminated\n", None),
        ("srun: error: Unable to create step for job 5: Job/step already completing or "
         "completed\n", "srun: Unable to create step for job 5: Job/step already completing or "
         "completed"),
        ("srun: Slurm job 3 has expired\n", None),
        ("", None),
    ],
)
def test_srun_failure(stderr: str, error: str | None) -> None:
    assert srun_failure(stderr) == error


# --------------------------------------------------------------------------- launch --dry-run


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


def _fake_scontrol(tmp_path: Path, fixture: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "scontrol"
    tool.write_text(f"#!/bin/sh\nexec /bin/cat {FIXTURES / fixture}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(bindir)


def _dry_run(tmp_path: Path, script: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    # --no-probe: these hosts exist only in the fake allocation
    argv = ["launch", "--dry-run", "--no-probe", "--runs-dir", str(tmp_path / "runs"), *args,
            str(script)]
    result = CliRunner().invoke(cli, argv, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_dry_run_inside_slurm_uses_srun_and_scontrol_gpus(tmp_path: Path, script: Path) -> None:
    env = {"SLURM_JOB_ID": "11", "SLURM_JOB_NODELIST": "gpu[01-02]",
           "SLURM_TASKS_PER_NODE": "2(x2)", "PATH": _fake_scontrol(tmp_path,
                                                                   "scontrol_gpus3_on_2_nodes.txt")}
    code, out = _dry_run(tmp_path, script, env)
    assert code == 0, out
    assert "inside slurm job 11: 2 node(s), 4 slots" in out
    assert "gpu02: 2 tasks but 1 GPU(s) granted" in out  # the per-node split from scontrol
    assert "backend:     srun   ranks: 4" in out
    assert "srun --mpi=pmix --nodes=2 --ntasks=4 --ntasks-per-node=2" in out


def test_dry_run_inside_slurm_backend_override(tmp_path: Path, script: Path) -> None:
    env = {"SLURM_JOB_ID": "11", "SLURM_JOB_NODELIST": "gpu[01-02]",
           "SLURM_TASKS_PER_NODE": "2(x2)", "PATH": str(tmp_path)}  # no scontrol: env only
    code, out = _dry_run(tmp_path, script, env, "--backend", "mpirun")
    assert code == 0, out
    assert "backend:     mpirun   ranks: 4" in out and "gpu01 slots=2" in out


def test_dry_run_inside_pbs_uses_mpirun(tmp_path: Path, script: Path) -> None:
    env = {"PBS_JOBID": "99.pbs", "PBS_NODEFILE": str(FIXTURES / "pbs_select2_mpiprocs4.nodefile")}
    code, out = _dry_run(tmp_path, script, env)
    assert code == 0, out
    assert "inside pbs job 99.pbs: 2 node(s), 8 slots" in out
    assert "backend:     mpirun   ranks: 8" in out
    assert "node-a01 slots=4" in out and "node-b07 slots=4" in out


def test_hosts_beat_the_scheduler(tmp_path: Path, script: Path) -> None:
    env = {"SLURM_JOB_ID": "11", "SLURM_JOB_NODELIST": "gpu[01-02]",
           "SLURM_TASKS_PER_NODE": "2(x2)"}
    code, out = _dry_run(tmp_path, script, env, "-H", "localhost:2")
    assert code == 0, out
    assert "inside slurm" not in out and "backend:     mpirun" in out


def test_srun_backend_outside_slurm_is_refused(tmp_path: Path, script: Path) -> None:
    env = {k: "" for k in os.environ if k.startswith(("SLURM_", "PBS_"))}
    argv = ["launch", "--backend", "srun", "-H", "localhost:2", str(script)]
    result = CliRunner().invoke(cli, argv, env={**env, "SLURM_JOB_ID": None})  # type: ignore[dict-item]
    assert result.exit_code == 2
    assert "--backend srun needs a Slurm allocation" in result.output


def test_slurm_env_error_reaches_the_user(tmp_path: Path, script: Path) -> None:
    env = {"SLURM_JOB_ID": "11", "SLURM_JOB_NODELIST": "gpu[01-02]",
           "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_ID": "0", "PATH": str(tmp_path)}
    code, out = _dry_run(tmp_path, script, env)
    assert code == 7
    assert "must run once per job" in out and "fix:" in out


def test_ringtrains_own_srun_steps_carry_no_secret_of_the_launcher() -> None:
    """Issue 40: the probe, the secrets file and the reaper run as srun steps with
    --export=ALL: their environment is the launcher's less its secrets (by name or value) and
    less the variables --env names, whatever they are called."""
    from ringtrain.launch.job.hosts import resolve
    environ = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[01-02]",
               "SLURM_TASKS_PER_NODE": "1(x2)", "PATH": "/usr/bin:/bin",
               "AWS_SECRET_ACCESS_KEY": "aws", "DB_URL": "postgres://u:pw@db/x",
               "PROBE_VALUE": "mine", "SHOWN": "yes"}
    spec = LaunchSpec(script="t.py", working_dir=Path("/w"),
                      env=(EnvSpec("PROBE_VALUE"), EnvSpec("SHOWN", plain=True)))
    remote = resolve(spec, environ).remote
    assert isinstance(remote, SrunRemote) and remote.env is not None
    assert remote.env["PATH"] == "/usr/bin:/bin" and remote.env["SHOWN"] == "yes"
    assert not {"AWS_SECRET_ACCESS_KEY", "DB_URL", "PROBE_VALUE"} & set(remote.env)
