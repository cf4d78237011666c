"""The user's own srun options (``launch --srun-args``), srun's MPI plugin (``SLURM_MPI_TYPE``)
and the user's sbatch options (``slurm render|submit --qos ... --sbatch-arg``). The words
refused or accepted here were put to the real srun and sbatch (Slurm 22.05) of the test
cluster: ``--lab`` ran as ``--label``, ``--exc=gpu02`` was "ambiguous", a command-line ``--mpi``
beat ``SLURM_MPI_TYPE``; tests/integration/test_slurm_launch.py runs one in a real job."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.assembly import LaunchOptions, build_spec
from ringtrain.cli import cli
from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_slurm_env
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.schedulers.batch import SBATCH_OWNED, BatchJob, render_sbatch
from ringtrain.slurm_options import check_sbatch_arg, check_srun_args, srun_mpi
from ringtrain.spec import Backend, LaunchSpec


@pytest.mark.parametrize("words", [
    ["--cpu-bind=cores", "--gpus-per-task=1"],
    ["--cpu-bind", "cores", "--gpu-bind=closest"],  # a value as the next word
    ["-c", "4", "-u"], ["-c4"], ["-vu"], ["--overlap"], ["--exclusive"], ["--exclusive=user"],
    ["--mpi=pmi2"], ["--mem-per-cpu=2G", "--hint=nomultithread"],
    ["--some-newer-option=1"],  # srun itself judges what the table does not know
])
def test_srun_options_of_the_users_own_pass(words: list[str]) -> None:
    check_srun_args(words)


@pytest.mark.parametrize(("words", "needle"), [
    (["--nodes=2"], "--nodes=2: ringtrain sets this srun option itself: ringtrain places"),
    (["--ntasks-per-node=1"], "places the ranks"),
    (["-w", "gpu01"], "-w (srun's --nodelist)"),
    (["-N2"], "srun's --nodes"),
    (["-ul"], "srun's --label"),  # a cluster of short flags
    (["--lab"], "--lab (srun's --label)"),  # getopt_long's abbreviation, as srun ran it
    (["--nodel=gpu01"], "srun's --nodelist"),
    (["--distribution=block"], "places the ranks"),
    (["--export=NONE"], "--export"),
    (["--output=x.log"], "labelled output"),
    (["-K0"], "srun's --kill-on-bad-exit"),
    (["--multi-prog"], "rank entry"),
    (["--exc=gpu02"], "any of --exclude, --exclusive"),  # srun: "ambiguous"
    (["hostname"], "would run 'hostname' as the program"),
    (["--overlap", "hostname"], "as the program"),  # --overlap takes no value
    (["--", "--cpu-bind=none"], "after '--'"),
    (["--cpu-bind"], "needs a value"),
    (["-c"], "needs a value"),
])
def test_options_ringtrain_owns_or_srun_would_misread_are_refused(
        words: list[str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        check_srun_args(words)
    assert needle in err.value.message and err.value.hint


def test_srun_args_are_for_srun_only() -> None:
    with pytest.raises(UsageError, match=r"--srun-args is for srun; .* with mpirun"):
        LaunchSpec(script="t.py", backend=Backend.MPIRUN, srun_args=("--cpu-bind=none",))
    with pytest.raises(UsageError, match="horovodrun"):
        build_spec(LaunchOptions(script="t.py", backend="horovodrun", srun_args=("-c2",)),
                   Path("/w"))
    # no backend yet: inside a Slurm job prepare() picks srun (checked there, below)
    spec = build_spec(LaunchOptions(script="t.py", srun_args=("--cpu-bind=none",)), Path("/w"))
    assert spec.srun_args == ("--cpu-bind=none",)
    with pytest.raises(UsageError, match="--export"):  # checked however the spec is made
        LaunchSpec.from_json({**spec.to_json(), "srun_args": ["--export=NONE"]})


def test_srun_mpi_plugin_the_users_then_slurm_mpi_type_then_pmix() -> None:
    assert srun_mpi((), {}) == "pmix"
    assert srun_mpi((), {"SLURM_MPI_TYPE": "pmi2"}) == "pmi2"
    assert srun_mpi(("--mpi=none",), {"SLURM_MPI_TYPE": "pmi2"}) is None  # theirs, alone
    assert srun_mpi(("--mp=pmix_v4",), {}) is None  # srun reads --mp as --mpi
    with pytest.raises(UsageError, match="SLURM_MPI_TYPE"):
        srun_mpi((), {"SLURM_MPI_TYPE": "pmix --export=NONE"})


def _srun_argv(environ: dict[str, str], srun_args: tuple[str, ...] = ()) -> tuple[str, ...]:
    spec = LaunchSpec(script="t.py", backend=Backend.SRUN, working_dir=Path("/w"),
                      srun_args=srun_args)
    inputs = PlanInputs(SessionEnv("R", environ, False, "/p"))
    return make_plan(spec, allocate(parse_slurm_env("n[1-2]", "2(x2)"), None),
                     inputs).command.argv


def test_srun_argv_carries_the_plugin_and_the_users_options_before_the_rank() -> None:
    argv = _srun_argv({}, ("--cpu-bind=cores", "-c", "2"))
    assert argv[:2] == ("srun", "--mpi=pmix")
    at = argv.index("--cpu-bind=cores")
    assert argv[at - 1].startswith("--export=ALL") and argv[at:at + 4] == (
        "--cpu-bind=cores", "-c", "2", "/p")
    assert _srun_argv({"SLURM_MPI_TYPE": "pmi2"})[:2] == ("srun", "--mpi=pmi2")
    mine = _srun_argv({"SLURM_MPI_TYPE": "pmi2"}, ("--mpi=pmix_v4",))
    assert mine[1] == "--nodes=2" and [a for a in mine if a.startswith("--mpi=")] == [
        "--mpi=pmix_v4"]


def _launch(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    argv = ["launch", "--dry-run", "--no-probe", "--runs-dir", str(tmp_path / "runs"), *args,
            str(script)]
    result = CliRunner().invoke(cli, argv, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


SLURM_ENV = {"SLURM_JOB_ID": "11", "SLURM_JOB_NODELIST": "gpu[01-02]",
             "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_MPI_TYPE": "pmi2"}


def test_cli_srun_args_inside_and_outside_slurm(tmp_path: Path) -> None:
    env = {**SLURM_ENV, "PATH": str(tmp_path)}  # no scontrol: the allocation from env only
    code, out = _launch(tmp_path, env, "--srun-args=--cpu-bind=cores --gpus-per-task=1",
                        "--srun-args", "-c 2")
    assert code == 0, out
    assert "srun --mpi=pmi2 --nodes=2" in out
    assert "--cpu-bind=cores --gpus-per-task=1 -c 2 /" in out
    code, out = _launch(tmp_path, env, "--srun-args=--ntasks=8")
    assert code == 2 and "ringtrain sets this srun option itself" in out and "fix:" in out
    code, out = _launch(tmp_path, env, "--srun-args", "--cpu-bind='cores")
    assert code == 2 and "--srun-args" in out and "quotation" in out
    outside = {k: None for k in SLURM_ENV}
    code, out = _launch(tmp_path, outside, "-H", "localhost:2",  # type: ignore[arg-type]
                        "--srun-args=--cpu-bind=none")
    assert code == 2 and "--srun-args is for srun; this launch starts the ranks with mpirun" in out


# --------------------------------------------------------------------------- sbatch

JOB = BatchJob(script="/w/t.py", nodes=2, working_dir="/w", python="/venv/bin/python")


def test_sbatch_shape_and_the_users_own_options_as_directives() -> None:
    job = BatchJob(**{**_fields(JOB), "qos": "high", "constraint": "a100&ib", "mem": "64G",
                      "reservation": "maint", "exclusive": True,
                      "sbatch_args": ("--mail-type=END", "--gres=gpu:a100:4", "--hold")})
    lines = render_sbatch(job).splitlines()
    directives = [line for line in lines if line.startswith("#SBATCH ")]
    for want in ("--qos=high", "--constraint=a100&ib", "--mem=64G", "--reservation=maint",
                 "--exclusive", "--mail-type=END", "--gres=gpu:a100:4", "--hold"):
        assert f"#SBATCH {want}" in directives
    assert lines.index(directives[-1]) < lines.index("set -eo pipefail")  # before any command
    assert "--exclusive" not in render_sbatch(JOB) and "--qos" not in render_sbatch(JOB)


@pytest.mark.parametrize(("change", "needle"), [
    ({"mem": "4 G"}, "--mem"), ({"mem": "lots"}, "--mem"),
    ({"qos": "high\nrm -rf ~"}, "--qos"), ({"constraint": "a100 ib"}, "--constraint"),
    ({"reservation": "a;b"}, "--reservation"),
    ({"sbatch_args": ("--comment=two words",)}, "not one sbatch option"),
    ({"sbatch_args": ("--comment=x\n#SBATCH --uid=0",)}, "not one sbatch option"),
    ({"sbatch_args": ('--comment="x"',)}, "not one sbatch option"),
    ({"sbatch_args": ("-p", "gpu")}, "not one sbatch option"),
    ({"sbatch_args": ("--time=1:00:00",)}, "writes #SBATCH --time itself"),
    ({"sbatch_args": ("--qos=x",)}, "writes #SBATCH --qos itself"),
    ({"sbatch_args": ("--wrap=hostname",)}, "--wrap"),
    ({"sbatch_args": ("--ti=5",)}, "any of --time, --time-min"),  # sbatch: ambiguous
])
def test_sbatch_refuses_what_would_break_or_duplicate_a_directive(
        change: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        render_sbatch(BatchJob(**{**_fields(JOB), **change}))  # type: ignore[arg-type]
    assert needle in err.value.message and err.value.hint


def test_every_option_ringtrain_slurm_writes_is_owned() -> None:
    full = BatchJob(**{**_fields(JOB), "gpus_per_node": 1, "cpus_per_task": 1, "queue": "q",
                       "time": "5", "account": "a", "qos": "q", "constraint": "f", "mem": "1",
                       "reservation": "r", "exclusive": True, "requeue": True})
    written = {line.split()[1].lstrip("-").partition("=")[0]
               for line in render_sbatch(full).splitlines() if line.startswith("#SBATCH ")}
    assert written <= set(SBATCH_OWNED)
    assert check_sbatch_arg("--gpus=8", SBATCH_OWNED) == "--gpus=8"  # not --gpus-per-node


def test_cli_slurm_render_shape_options() -> None:
    argv = ["slurm", "render", "--workdir", "/w", "--python", "/venv/bin/python", "--nodes", "2",
            "--qos", "high", "-C", "a100&ib", "--mem", "64G", "--reservation", "maint",
            "--exclusive", "--sbatch-arg=--mail-type=END", "--sbatch-arg", "--hold", "/w/t.py"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert result.stdout == render_sbatch(BatchJob(
        **{**_fields(JOB), "qos": "high", "constraint": "a100&ib", "mem": "64G",
           "reservation": "maint", "exclusive": True,
           "sbatch_args": ("--mail-type=END", "--hold")}))
    result = CliRunner().invoke(cli, [*argv[:-1], "--sbatch-arg=--nodes=3", "/w/t.py"])
    assert result.exit_code == 2 and "pass --nodes" in result.output


def _fields(job: BatchJob) -> dict[str, object]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}
