"""sbatch / qsub script rendering (golden files) and ``ringtrain slurm|pbs render|submit``."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.errors import UsageError
from ringtrain.schedulers.batch import BatchJob, render_qsub, render_sbatch
from tests.golden import assert_golden

JOB = BatchJob(
    script="/work/job/train.py",
    script_args=("--epochs", "10", "--note", "two words"),
    nodes=4,
    gpus_per_node=4,
    queue="gpu",
    time="2:00:00",
    account="proj42",
    python="/opt/venv/bin/python",
    working_dir="/work/job",
    launch_args=("--max-restarts", "2", "--checkpoint", "s3://bucket/run1"),
    setup=("module load cuda/12.2",),
)


def test_sbatch_golden() -> None:
    assert_golden("schedulers/sbatch_4x4.sh", render_sbatch(JOB))


def test_sbatch_minimal_cpu_job_golden() -> None:
    job = BatchJob(script="/w/digits.py", nodes=2, tasks_per_node=2, working_dir="/w",
                   python="/venv/bin/python")
    assert_golden("schedulers/sbatch_cpu_2x2.sh", render_sbatch(job))


def test_qsub_golden() -> None:
    assert_golden("schedulers/qsub_4x4.sh", render_qsub(JOB, ncpus=32))


def test_qsub_select_defaults() -> None:
    text = render_qsub(BatchJob(script="/w/t.py", nodes=2, gpus_per_node=8, cpus_per_task=4,
                                working_dir="/w"))
    assert "#PBS -l select=2:ncpus=32:ngpus=8:mpiprocs=8\n" in text
    text = render_qsub(BatchJob(script="/w/t.py", nodes=3, working_dir="/w"))
    assert "#PBS -l select=3:ncpus=1:mpiprocs=1\n" in text  # no ngpus on a CPU job


def test_tasks_default_to_gpus() -> None:
    assert BatchJob(script="x", gpus_per_node=8).ntasks_per_node == 8
    assert BatchJob(script="x", gpus_per_node=8, tasks_per_node=2).ntasks_per_node == 2
    assert BatchJob(script="x").ntasks_per_node == 1


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"queue": "gpu\n#SBATCH --uid=0"}, "--partition/--queue"),
        ({"account": "a b"}, "--account"),
        ({"time": "2 hours"}, "--time"),
        ({"job_name": "x;y"}, "--job-name"),
        ({"nodes": 0}, "--nodes"),
        ({"gpus_per_node": -1}, "--gpus-per-node"),
        ({"setup": ("ok", "two\nlines")}, "--setup"),
        ({"working_dir": "relative/dir"}, "not absolute"),
        ({"working_dir": "/has space"}, "working directory"),
        ({"output": "out file.txt"}, "--output"),
    ],
)
def test_sbatch_refuses_unsafe_values(change: dict[str, object], needle: str) -> None:
    job = BatchJob(**{**_fields(JOB), **change})  # type: ignore[arg-type]
    with pytest.raises(UsageError) as err:
        render_sbatch(job)
    assert needle in err.value.message and err.value.hint


@pytest.mark.parametrize("value", ["30", "30:00", "4:00:00", "1-12", "1-12:30", "2-0:0:0",
                                   "UNLIMITED"])
def test_slurm_time_forms(value: str) -> None:
    assert f"--time={value}\n" in render_sbatch(BatchJob(**{**_fields(JOB), "time": value}))


def test_pbs_time_and_name_rules() -> None:
    with pytest.raises(UsageError, match="--time"):
        render_qsub(BatchJob(**{**_fields(JOB), "time": "1-12:00:00"}))
    with pytest.raises(UsageError, match="must start with a letter"):
        render_qsub(BatchJob(**{**_fields(JOB), "job_name": "9lives"}))


def _fields(job: BatchJob) -> dict[str, object]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


# --------------------------------------------------------------------------- CLI


def _invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


CLI_ARGS = ["--nodes", "4", "--gpus-per-node", "4", "--time", "2:00:00", "--account", "proj42",
            "--python", "/opt/venv/bin/python", "--workdir", "/work/job",
            "--launch-arg=--max-restarts", "--launch-arg=2", "--launch-arg=--checkpoint",
            "--launch-arg=s3://bucket/run1", "--setup", "module load cuda/12.2",
            "/work/job/train.py", "--epochs", "10", "--note", "two words"]


def test_cli_slurm_render_equals_the_library() -> None:
    code, out, _ = _invoke(["slurm", "render", "--partition", "gpu", *CLI_ARGS])
    assert code == 0
    assert out == render_sbatch(JOB)


def test_cli_pbs_render_equals_the_library() -> None:
    code, out, _ = _invoke(["pbs", "render", "--queue", "gpu", "--ncpus", "32", *CLI_ARGS])
    assert code == 0
    assert out == render_qsub(JOB, ncpus=32)


def test_cli_relative_script_is_made_absolute(tmp_path: Path) -> None:
    code, out, _ = _invoke(["slurm", "render", "--workdir", str(tmp_path), "train.py"])
    assert code == 0 and f" {tmp_path}/train.py\n" in out


def _fake_tool(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_cli_slurm_submit_prints_the_job_id(tmp_path: Path) -> None:
    env = _fake_tool(tmp_path, "sbatch", f'echo "$@" > {tmp_path}/args; echo "4242;cluster1"')
    out_script = tmp_path / "job.sbatch"
    code, out, err = _invoke(["slurm", "submit", "--script-out", str(out_script),
                              "--workdir", str(tmp_path), "-N", "2", "train.py"], env)
    assert code == 0, err
    assert out == "4242\n"
    assert "submitted" in err and "Slurm job 4242" in err
    assert (tmp_path / "args").read_text().split() == ["--parsable", str(out_script)]
    assert out_script.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=ringtrain-train\n")
    assert os.access(out_script, os.X_OK)


def test_cli_slurm_submit_refused(tmp_path: Path) -> None:
    env = _fake_tool(tmp_path, "sbatch",
                     'echo "sbatch: error: invalid partition specified: nope" >&2; exit 1')
    code, _, err = _invoke(["slurm", "submit", "-p", "nope", "--workdir", str(tmp_path),
                            "train.py"], env)
    assert code == 7
    assert "invalid partition specified: nope" in err and "fix:" in err


def test_cli_pbs_submit_prints_the_job_id(tmp_path: Path) -> None:
    env = _fake_tool(tmp_path, "qsub", 'echo "1234.pbs-server"')
    code, out, err = _invoke(["pbs", "submit", "--workdir", str(tmp_path), "train.py"], env)
    assert code == 0, err
    assert out == "1234.pbs-server\n"
    assert (tmp_path / "ringtrain-train.pbs").read_text().startswith("#!/bin/bash\n#PBS -N ")


def test_cli_submit_without_scheduler(tmp_path: Path) -> None:
    code, _, err = _invoke(["slurm", "submit", "--workdir", str(tmp_path), "train.py"],
                           {"PATH": str(tmp_path)})
    assert code == 7 and "sbatch not found" in err


# --------------------------------------------------------------------------- preemption


def test_sbatch_asks_for_sigusr1_ahead_of_the_end_by_default() -> None:
    script = render_sbatch(JOB)
    assert "#SBATCH --signal=B:USR1@120\n" in script
    assert "--requeue" not in script and "--open-mode" not in script
    assert "--signal" not in render_sbatch(replace(JOB, signal_lead_s=None))


def test_sbatch_requeue_appends_output_and_passes_requeue_to_the_launch() -> None:
    script = render_sbatch(replace(JOB, requeue=True, signal_lead_s=300))
    assert "#SBATCH --signal=B:USR1@300\n#SBATCH --requeue\n#SBATCH --open-mode=append\n" in script
    assert "-m ringtrain launch --requeue --max-restarts 2" in script
    with pytest.raises(UsageError, match="--requeue needs the preemption signal"):
        render_sbatch(replace(JOB, requeue=True, signal_lead_s=None))
    with pytest.raises(UsageError, match="--signal-lead 0 is out of range"):
        render_sbatch(replace(JOB, signal_lead_s=0))


def test_cli_signal_lead_and_requeue() -> None:
    code, out, _ = _invoke(["slurm", "render", "--partition", "gpu", "--requeue",
                            "--signal-lead", "90", *CLI_ARGS])
    assert code == 0 and out == render_sbatch(replace(JOB, requeue=True, signal_lead_s=90))
    code, out, _ = _invoke(["slurm", "render", "--signal-lead", "0", *CLI_ARGS])
    assert code == 0 and "--signal" not in out


def test_launch_requeue_outside_slurm_or_without_a_checkpoint_is_refused(
        tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    env = {k: "" for k in os.environ if k.startswith("SLURM_")}
    code, _, err = _invoke(["launch", "--requeue", "-H", "localhost:1", str(script)], env=env)
    assert code == 2 and "not inside a Slurm batch job" in err and "fix:" in err
    code, _, err = _invoke(["launch", "--requeue", "-H", "localhost:1", str(script)],
                           env={**env, "SLURM_JOB_ID": "42"})
    assert code == 2 and "pass --checkpoint URL" in err
