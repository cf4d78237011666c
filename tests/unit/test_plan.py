"""make_plan and the backends: exact argv, env delta and redaction, against golden files."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from ringtrain.assembly import LaunchOptions, build_spec
from ringtrain.checkpoint.location import Location
from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.job.hosts import with_ssh_defaults
from ringtrain.launch.job.run import prepare as run_prepare
from ringtrain.launch.job.rundir import make_run_dir
from ringtrain.launch.plan.make import PlanInputs, make_plan, read_recorded_spec
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.rank import envvars
from ringtrain.spec import Backend, Entry, EnvSpec, LaunchSpec, SshSpec
from tests.golden import assert_golden

ENVIRON = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/root",
    "LD_LIBRARY_PATH": "/opt/lib",
    "HOROVOD_FUSION_THRESHOLD": "67108864",
    "NCCL_DEBUG": "INFO",
    "TF_CLI_CONFIG_FILE": "/not/tensorflow",  # Terraform's, must not travel
    "MY_TOKEN": "s3cr3t",
    "UNRELATED": "x",
}


def _plan(spec: str = "localhost:2", *, root: bool = True, **kw: object):  # type: ignore[no-untyped-def]
    if "ssh_config" in kw:
        kw["ssh"] = SshSpec(config=kw.pop("ssh_config"))  # type: ignore[arg-type]
    if "checkpoint_url" in kw:
        kw["checkpoint"] = Location.parse(str(kw.pop("checkpoint_url")))
    request = LaunchSpec(
        script="train.py",
        script_args=("--epochs", "3"),
        host_spec=spec,
        working_dir=Path("/work/job"),
        runs_dir=Path("/work/job/runs"),
        **kw,  # type: ignore[arg-type]
    )
    alloc = allocate(parse_host_spec(spec), request.np)
    inputs = PlanInputs(SessionEnv("R1", ENVIRON, root, "/venv/bin/python"))
    return make_plan(request, alloc, inputs)


def test_openmpi_local_plan_matches_golden() -> None:
    plan = _plan(
        env=(EnvSpec("MY_TOKEN"), EnvSpec("API_SECRET", "hunter2"),
             EnvSpec("MODE", "fast", plain=True))
    )
    assert_golden("plan/openmpi_local.txt", plan.describe() + "\n")


def test_openmpi_argv_shape() -> None:
    argv = _plan().command.argv
    assert argv[:2] == ("mpirun", "--allow-run-as-root")
    assert argv[argv.index("-np") + 1] == "2"
    assert argv[argv.index("--hostfile") + 1] == "/work/job/runs/R1/attempt-1/hostfile"
    tail = ("/venv/bin/python", "-m", "ringtrain.rank.entry", "--mpi", "/work/job/train.py")
    assert argv[-7:-2] == tail
    assert argv[-2:] == ("--epochs", "3")
    forwarded = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert forwarded == {
        "PATH",
        "LD_LIBRARY_PATH",
        "HOROVOD_FUSION_THRESHOLD",
        "NCCL_DEBUG",
        "TF_CPP_MIN_LOG_LEVEL",
        "RINGTRAIN_RUN_DIR",
        "RINGTRAIN_RUN_ID",
        "RINGTRAIN_ATTEMPT",
        "RINGTRAIN_CHECKPOINT_GRACE",
    }


def test_not_root_has_no_run_as_root_flag() -> None:
    assert "--allow-run-as-root" not in _plan(root=False).command.argv


def test_secret_values_never_in_argv_or_description() -> None:
    plan = _plan(env=(EnvSpec("MY_TOKEN"), EnvSpec("API_SECRET", "hunter2")))
    text = plan.describe() + plan.to_json_text() + " ".join(plan.command.argv)
    assert "hunter2" not in text and "s3cr3t" not in text
    srun = _plan(backend=Backend.SRUN, env=(EnvSpec("MY_TOKEN"), EnvSpec("API_SECRET", "hunter2")))
    assert "hunter2" not in srun.describe() + " ".join(srun.command.argv)
    assert ("API_SECRET", "hunter2") in srun.command.secrets  # srun: by the secrets file too
    assert ("API_SECRET", "hunter2") in plan.command.secrets  # mpirun: by the secrets file


def test_horovodrun_gloo_plan_matches_golden() -> None:
    plan = _plan("localhost:2", backend=Backend.HOROVODRUN, gloo=True)
    assert plan.command.argv[0] == "/venv/bin/horovodrun"
    assert "--mpi" not in plan.command.argv[plan.command.argv.index("-m") :]
    assert_golden("plan/horovodrun_gloo.txt", plan.describe() + "\n")


def test_multi_host_plan_uses_ssh_config_and_tcp_subnet() -> None:
    plan = _plan(
        "gpu01:4,gpu02:4", ssh_config=Path("/etc/rt/ssh_config"), network_interface="10.1.2.0/24"
    )
    argv = plan.command.argv
    # ringtrain's own config (strict host keys) includes the user's for everything else
    assert "ssh -F /work/job/runs/R1/attempt-1/ssh_config" in argv
    assert plan.ssh_config_text.index("StrictHostKeyChecking yes") < plan.ssh_config_text.index(
        'Include "/etc/rt/ssh_config"')
    assert argv[argv.index("btl_tcp_if_include") + 1] == "10.1.2.0/24"
    assert plan.hostfile_text == "gpu01 slots=4\ngpu02 slots=4\n"


def test_forwarding_an_unset_variable_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="NOT_SET_ANYWHERE"):
        _plan(env=(EnvSpec("NOT_SET_ANYWHERE"),))


def test_gloo_needs_horovodrun() -> None:
    with pytest.raises(UsageError, match="--gloo"):
        LaunchSpec(script="x.py", gloo=True)


@pytest.mark.parametrize("text", ["1BAD", "A-B", "", "=x"])
def test_bad_env_names_rejected(text: str) -> None:
    with pytest.raises(UsageError):
        EnvSpec.parse(text)


def test_a_space_in_the_runs_dir_is_rejected_one_in_the_ssh_config_is_quoted() -> None:
    request = LaunchSpec(script="train.py", host_spec="gpu01:1,gpu02:1", working_dir=Path("/w"),
                         runs_dir=Path("/tmp/my runs"))
    inputs = PlanInputs(SessionEnv("R1", ENVIRON, False, "/venv/bin/python"))
    with pytest.raises(UsageError, match="spaces"):  # mpirun splits its rsh agent's line
        make_plan(request, allocate(parse_host_spec("gpu01:1,gpu02:1"), None), inputs)
    plan = _plan("gpu01:1,gpu02:1", ssh_config=Path("/tmp/my config"))
    assert 'Include "/tmp/my config"' in plan.ssh_config_text


def test_checkpoint_url_travels_by_environment() -> None:
    plan = _plan(checkpoint_url="s3://ckpt/digits")
    assert ("RINGTRAIN_CHECKPOINT_URL", "s3://ckpt/digits") in plan.command.env
    assert "RINGTRAIN_CHECKPOINT_URL" in plan.forwarded


@pytest.mark.parametrize(
    ("url", "needle"),
    [("s3://AKIA:secret@bucket/x", "credentials"), ("ftp://host/x", "unsupported scheme")],
)
def test_bad_checkpoint_urls(url: str, needle: str) -> None:
    with pytest.raises(UsageError, match=f"--checkpoint: .*{needle}"):
        build_spec(LaunchOptions("train.py", checkpoint_url=url), Path("/work/job"))


def test_empty_checkpoint_refused_and_paths_made_absolute() -> None:
    with pytest.raises(UsageError, match="--checkpoint: the checkpoint location is empty"):
        build_spec(LaunchOptions("train.py", checkpoint_url="  "), Path("/work/job"))
    where = Location.parse("ckpts/run1", Path("/work/job"))
    assert (where.protocol, where.text, where.url) == (
        "file", "/work/job/ckpts/run1", "file:///work/job/ckpts/run1")
    assert Location.parse("hdfs://nn:9000/x").protocol == "hdfs"


@pytest.mark.parametrize("url", ["s3:/bucket/x", "hdfs:/x", "s3:bucket"])
def test_one_parser_refuses_what_ckpt_ls_refuses(url: str) -> None:
    """`launch --checkpoint s3:/x` was taken for a local path while `ckpt ls s3:/x` refused it:
    both read it through Location.parse now."""
    with pytest.raises(UsageError, match="needs two slashes"):
        build_spec(LaunchOptions("train.py", checkpoint_url=url), Path("/work/job"))


def test_the_checkpoint_location_travels_to_the_ranks_and_back() -> None:
    where = Location.parse("s3://ckpt/run1/")
    plan = _plan(checkpoint_url="s3://ckpt/run1/")
    sent = dict(plan.command.env)["RINGTRAIN_CHECKPOINT_URL"]
    assert Location.parse(sent) == where  # the rank parses what the launcher sent
    spec = LaunchSpec.from_json(plan.spec.to_json())
    assert spec.checkpoint == where
    old = {**plan.spec.to_json(), "checkpoint": {"scheme": "s3", "url": "s3://ckpt/run1"}}
    assert LaunchSpec.from_json(old).checkpoint == where  # a plan.json of an older ringtrain
    assert Location.default(Path("/w/runs/r1")).manifests == "/w/runs/r1/checkpoints/manifests"


def test_plan_json_records_the_spec_and_reads_it_back_without_secret_values() -> None:
    plan = _plan(env=(EnvSpec("API_SECRET", "hunter2"), EnvSpec("MODE", "fast", plain=True)),
                 checkpoint_url="s3://ckpt/digits", np=2)
    data = plan.to_json()
    assert "hunter2" not in plan.to_json_text()
    spec = read_recorded_spec(data)
    assert spec == replace(plan.spec,
                           env=(EnvSpec("API_SECRET"), EnvSpec("MODE", "fast", plain=True)))


def test_horovodruns_ssh_is_ringtrains_shim_with_per_host_settings_and_strict_keys(
    tmp_path: Path,
) -> None:
    """horovodrun finds ssh on PATH and takes no config file; ringtrain puts its own shim first
    on horovodrun's PATH. Checked against the real OpenSSH (``ssh -G``): the hosts' ports and
    keys apply, and horovodrun's own ``-o StrictHostKeyChecking=no`` loses to the shim's."""
    request = LaunchSpec(script="train.py", host_spec="gpu01:2,gpu02:2",
                         backend=Backend.HOROVODRUN, working_dir=Path("/w"),
                         runs_dir=tmp_path / "runs", ssh=SshSpec(port=2222, identity_file="/k/id"))
    hosts = with_ssh_defaults(parse_host_spec("gpu01:2,gpu02:2"), request.ssh)
    mixed = replace(hosts, hosts=(hosts.hosts[0], replace(hosts.hosts[1], port=2200)))
    ssh = shutil.which("ssh") or "/usr/bin/ssh"
    inputs = PlanInputs(SessionEnv("R1", ENVIRON, False, "/venv/bin/python", ssh))
    plan = make_plan(request, allocate(mixed, None), inputs)
    assert "-p" not in plan.command.argv and "-i" not in plan.command.argv
    env = dict(plan.command.env)
    assert env["PATH"] == f"{plan.attempt_dir / 'bin'}:{ENVIRON['PATH']}"
    run_prepare(plan, make_run_dir(plan.run_dir))
    shim = plan.attempt_dir / "bin" / "ssh"
    assert stat.S_IMODE(shim.stat().st_mode) == 0o700

    def resolved(host: str) -> dict[str, str]:
        out = subprocess.run([str(shim), "-G", "-o", "PasswordAuthentication=no", "-o",
                              "StrictHostKeyChecking=no", host, "true"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    gpu01, gpu02 = resolved("gpu01"), resolved("gpu02")
    assert (gpu01["port"], gpu02["port"]) == ("2222", "2200")
    assert gpu01["identityfile"] == "/k/id" and gpu01["batchmode"] == "yes"
    assert gpu01["stricthostkeychecking"] == gpu02["stricthostkeychecking"] == "true"
    # on local slots horovodrun needs no ssh: no shim, PATH left alone
    local = make_plan(request, allocate(parse_host_spec("localhost:2"), None), inputs)
    assert local.ssh_shim_text == "" and "PATH" not in dict(local.command.env)
    # mpirun: the same settings through its ssh's config, per host
    mpirun = make_plan(replace(request, backend=None), allocate(hosts, None), inputs)
    assert "Port 2222" in mpirun.ssh_config_text and mpirun.ssh_shim_text == ""


def test_module_program_and_mpi_args_in_the_rank_command() -> None:
    mod = _plan(entry=Entry.MODULE, mpi_args=("--report-bindings",))
    argv = list(mod.command.argv)
    tail = argv[argv.index("--report-bindings"):]
    assert tail == ["--report-bindings", "/venv/bin/python", "-m", "ringtrain.rank.entry",
                    "--mpi", "-m", "train.py", "--epochs", "3"]
    prog = _plan(entry=Entry.EXECUTABLE)  # a bare name: found on the hosts' PATH (the CLI
    # gives a program file in the working dir its whole path)
    assert list(prog.command.argv[-5:]) == ["--mpi", "--exec", "train.py", "--epochs", "3"]
    hvd = _plan(backend=Backend.HOROVODRUN, mpi_args=("-mca", "btl_tcp_if_exclude", "lo"))
    assert hvd.command.argv[hvd.command.argv.index("--mpi-args") + 1] == (
        "-mca btl_tcp_if_exclude lo")


def _supervised(backend: Backend | None, *, gloo: bool = False, attempt: int = 1,  # type: ignore[no-untyped-def]
                checkpoint: str | None = "s3://ckpt/r1", env: tuple[EnvSpec, ...] = ()):
    """A real launch's plan (control address and token set), with secrets in the launcher's
    environment (MY_TOKEN, AWS_SECRET_ACCESS_KEY: the checkpoint on S3 needs it) and in --env
    (API_SECRET; MODE said plain)."""
    request = LaunchSpec(script="train.py", host_spec="gpu01:2,gpu02:2", backend=backend,
                         gloo=gloo, working_dir=Path("/w"),
                         checkpoint=Location.parse(checkpoint) if checkpoint else None,
                         env=(EnvSpec("API_SECRET", "hunter2"), EnvSpec("MODE", "fast", plain=True),
                              *env))
    environ = {**ENVIRON, "AWS_SECRET_ACCESS_KEY": "aws-value", "HOROVOD_SECRET_KEY": "hvd-key"}
    inputs = PlanInputs(SessionEnv("R1", environ, False, "/venv/bin/python"),
                        attempt=attempt, control_addr="10.0.0.1:5000", control_token="tok-value")
    return make_plan(request, allocate(parse_host_spec("gpu01:2,gpu02:2"), None), inputs), environ


SECRETS = {"API_SECRET": "hunter2", "AWS_SECRET_ACCESS_KEY": "aws-value", "MY_TOKEN": "s3cr3t",
           envvars.CONTROL_TOKEN: "tok-value"}


def test_gloo_gives_horovodrun_the_secrets_names_only_and_their_values_by_file() -> None:
    """horovodrun --gloo writes its whole environment into each rank's ssh / sh -c command
    line: no secret value may be in it, from the launcher's environment or the delta."""
    plan, environ = _supervised(Backend.HOROVODRUN, gloo=True, attempt=2)
    command = plan.command
    child = command.environment(environ)  # what horovodrun is started with
    assert not set(SECRETS.values()) & set(child.values())
    assert not set(SECRETS) & set(child)
    assert set(command.unset) == set(SECRETS) and dict(command.secrets) == SECRETS
    assert child[envvars.ENV_FILE] == "~/.ringtrain/secrets/R1-2.json"  # same on every host
    assert child["MODE"] == "fast"
    assert child["PATH"] == f"{plan.attempt_dir / 'bin'}:/usr/bin:/bin"  # its ssh shim first
    assert child["HOROVOD_SECRET_KEY"] == "hvd-key"  # horovodrun never exports it: left alone
    shown = (plan.describe() + plan.to_json_text() + repr(command)
             + " ".join(command.argv))
    assert not [v for v in SECRETS.values() if v in shown]
    assert plan.to_json()["secrets_by_file"] == sorted(SECRETS)
    assert "~/.ringtrain/secrets/R1-2.json" not in plan.by_hand_argv  # no such file by hand


def _x_names(argv: tuple[str, ...]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-x"]


def test_mpirun_forwards_the_secrets_file_not_the_secrets() -> None:
    """Issue 40: Open MPI ships the value of every ``-x`` name to each host's orted in its
    launch message, in clear. The token, AWS keys and --env secrets go by the secrets file;
    mpirun forwards its name, RINGTRAIN_ENV_FILE, and has none of them in its environment.
    (MY_TOKEN, in the launcher's environment but never forwarded, stays where it is.)"""
    plan, environ = _supervised(None, attempt=2)
    command = plan.command
    names = _x_names(command.argv)
    sent = {**{k: v for k, v in SECRETS.items() if k != "MY_TOKEN"},
            "HOROVOD_SECRET_KEY": "hvd-key"}  # forwarded (HOROVOD_*) and a secret: by file too
    assert envvars.CONTROL_TOKEN not in names and not set(SECRETS) & set(names)
    assert envvars.ENV_FILE in names and "MODE" in names and "PATH" in names
    assert set(plan.forwarded) == set(names)
    child = command.environment(environ)  # what mpirun is started with (local ranks inherit)
    assert not set(sent.values()) & set(child.values())
    assert not set(sent) & set(child)
    assert set(command.unset) == set(sent) and dict(command.secrets) == sent
    assert child[envvars.ENV_FILE] == "~/.ringtrain/secrets/R1-2.json"  # same on every host
    assert child["MODE"] == "fast"
    shown = plan.describe() + plan.to_json_text() + repr(command) + " ".join(command.argv)
    assert not [v for v in SECRETS.values() if v in shown]
    assert plan.to_json()["secrets_by_file"] == sorted(sent)
    assert "secrets to the ranks by file" in plan.describe()
    # by hand there is no file: the secrets are forwarded by name again (their values exported)
    by_hand = plan.by_hand_argv
    assert envvars.ENV_FILE not in by_hand and f"-x {envvars.CONTROL_TOKEN}" in by_hand
    assert "-x API_SECRET" in by_hand and "hunter2" not in by_hand


def test_horovodrun_mpi_sends_secrets_by_file_as_gloo_does() -> None:
    """horovodrun --mpi gives its mpirun ``-x`` for its whole environment: the same file."""
    plan, environ = _supervised(Backend.HOROVODRUN)
    command = plan.command
    assert "--mpi" in command.argv
    child = command.environment(environ)
    assert not set(SECRETS) & set(child) and dict(command.secrets) == SECRETS
    assert child[envvars.ENV_FILE] == "~/.ringtrain/secrets/R1-1.json"
    assert child["HOROVOD_SECRET_KEY"] == "hvd-key"  # horovodrun never exports it: left alone


def test_srun_sends_the_secrets_by_file_as_mpirun_does() -> None:
    """Issue 40: srun ships its whole environment (--export=ALL) to every node's slurmd in its
    launch request: the token, --env secrets and AWS keys leave it and go by file; --export
    names the file, and srun's argv and environment hold no secret value."""
    plan, environ = _supervised(Backend.SRUN)
    command = plan.command
    sent = {**SECRETS, "HOROVOD_SECRET_KEY": "hvd-key"}  # all of srun's environment: MY_TOKEN too
    child = command.environment(environ)  # what srun is started with
    assert not set(sent.values()) & set(child.values()) and not set(sent) & set(child)
    assert set(command.unset) == set(sent) and dict(command.secrets) == sent
    assert child[envvars.ENV_FILE] == "~/.ringtrain/secrets/R1-1.json"
    assert child["MODE"] == "fast"  # said plain: in the environment, shown
    (export,) = [a for a in command.argv if a.startswith("--export=")]
    assert envvars.ENV_FILE in export.split(",") and not set(sent) & set(export.split(","))
    shown = plan.describe() + plan.to_json_text() + repr(command) + " ".join(command.argv)
    assert not [v for v in sent.values() if v in shown]
    assert "srun sends their values to every node's slurmd in clear" in plan.describe()


def test_env_values_are_secret_unless_said_plain_whatever_their_name() -> None:
    """Issue 40: no guessing by name for what the user hands the ranks: --env MYSQL_PWD=...
    and --env WANDB_API=... go by file and are never shown; --env-plain says a value is not
    secret (even under a secret-looking name); a startup variable cannot wait for the file."""
    env = (EnvSpec("MYSQL_PWD", "pw-1"), EnvSpec("WANDB_API", "wb-2"),
           EnvSpec("API_TOKEN_HINT", "shown-3", plain=True),
           EnvSpec("LD_LIBRARY_PATH", "/opt/lib"))
    for backend, gloo in ((None, False), (Backend.HOROVODRUN, True), (Backend.SRUN, False)):
        plan, environ = _supervised(backend, gloo=gloo, env=env)
        secrets = dict(plan.command.secrets)
        assert secrets["MYSQL_PWD"] == "pw-1" and secrets["WANDB_API"] == "wb-2", backend
        child = plan.command.environment(environ)
        assert child["API_TOKEN_HINT"] == "shown-3" and child["LD_LIBRARY_PATH"] == "/opt/lib"
        assert "MYSQL_PWD" not in child and "WANDB_API" not in child
        shown = plan.describe() + plan.to_json_text() + " ".join(plan.command.argv)
        assert "pw-1" not in shown and "wb-2" not in shown and "shown-3" in shown, backend
        recorded = {e["name"]: e["value"] for e in plan.to_json()["spec"]["env"]}
        assert recorded["MYSQL_PWD"] is None and recorded["API_TOKEN_HINT"] == "shown-3"


def test_aws_keys_reach_the_ranks_only_for_a_checkpoint_on_s3_or_when_named() -> None:
    """Issue 40: AWS keys only where a rank needs them. Without an S3 checkpoint the launcher's
    AWS keys reach no rank on any backend (withheld, not by file, not forwarded); --env
    AWS_SECRET_ACCESS_KEY forwards it again, by file."""
    for backend, gloo in ((None, False), (Backend.HOROVODRUN, True), (Backend.SRUN, False)):
        plan, environ = _supervised(backend, gloo=gloo, checkpoint=None)
        assert "AWS_SECRET_ACCESS_KEY" in plan.command.withheld, backend
        assert "AWS_SECRET_ACCESS_KEY" not in dict(plan.command.secrets)
        assert "AWS_SECRET_ACCESS_KEY" not in plan.command.environment(environ)
        assert "AWS_SECRET_ACCESS_KEY" not in plan.forwarded
        named, _ = _supervised(backend, gloo=gloo, checkpoint=None,
                               env=(EnvSpec("AWS_SECRET_ACCESS_KEY"),))
        assert dict(named.command.secrets)["AWS_SECRET_ACCESS_KEY"] == "aws-value", backend
        on_s3, _ = _supervised(backend, gloo=gloo)
        assert dict(on_s3.command.secrets)["AWS_SECRET_ACCESS_KEY"] == "aws-value", backend


def test_mpirun_without_secrets_is_as_before() -> None:
    """A dry run (no control token) with no secret anywhere: no file, nothing unset."""
    plan = _plan()
    assert (plan.command.unset, plan.command.secrets) == ((), ())
    assert envvars.ENV_FILE not in _x_names(plan.command.argv)


def test_secrets_are_redacted_by_value_as_well_as_by_name() -> None:
    """Issue 23: DATABASE_URL=postgres://u:pw@... was stored whole: a URL's password (and a
    private key) is a secret whatever the variable is called."""
    plan = _plan(backend=Backend.SRUN,  # said plain: the values in plan.json, redacted by value
                 env=(EnvSpec("DATABASE_URL", "postgres://app:hunter2@db:5432/x", plain=True),
                      EnvSpec("TLS_PEM", "-----BEGIN PRIVATE KEY-----\nabc", plain=True),
                      EnvSpec("SITE", "https://example.org/a:b@c", plain=True)))
    text = plan.to_json_text() + plan.describe()
    assert "hunter2" not in text and "BEGIN PRIVATE" not in text
    stored = json.loads(plan.to_json_text())
    # said plain, but a password in its value: by file all the same, never shown
    assert {"DATABASE_URL", "TLS_PEM"} <= set(stored["secrets_by_file"])
    assert stored["env"]["SITE"] == "https://example.org/a:b@c"  # no password in it
    recorded = {e["name"]: e["value"] for e in stored["spec"]["env"]}
    assert recorded["DATABASE_URL"] is None and recorded["SITE"] == "https://example.org/a:b@c"
    assert set(plan.secret_names) >= {"DATABASE_URL", "TLS_PEM"}
