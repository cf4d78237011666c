"""build_spec: the launch options -> one LaunchSpec (golden), its JSON round trip, and the
CLI's parameters matching LaunchOptions one for one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ringtrain.assembly import LaunchOptions, build_spec
from ringtrain.cli.launch_cmd import command
from ringtrain.errors import UsageError
from ringtrain.spec import Backend, Entry, EnvSpec, GpuRule, LaunchSpec
from tests.golden import assert_golden

FULL = LaunchOptions(
    script="train.py",
    script_args=("--epochs", "3"),
    hosts_file="hosts/cluster.yaml",
    np=8,
    backend="horovodrun",
    gloo=True,
    tf_port=24000,
    env=(EnvSpec("NCCL_DEBUG"), EnvSpec("MODE", "fast")),
    ssh_config=Path("/etc/rt/ssh_config"),
    known_hosts=Path("/etc/rt/known_hosts"),
    ssh_port=2222,
    ssh_identity_file="/etc/rt/id_ed25519",
    ssh_transport="openssh",
    gpu_mode="ignored",
    ring_check=True,
    expect_link="25gbit",
    slow_ratio=0.4,
    on_slow_host="exclude",
    on_bad_host="exclude",
    min_hosts=2,
    include=("gpu0*",),
    exclude=("gpu03",),
    slots=(("gpu04", 2),),
    ring_label="rack",
    allow_mixed_versions=True,
    network_interface="10.1.0.0/16",
    python="/opt/py/bin/python",
    checkpoint_url="ckpts/run1",
    max_restarts=2,
    min_np=4,
    stall_restarts=5,
    recheck_timeout=7.5,
    start_timeout=60,
    stall_timeout=300,
    heartbeat_timeout=5,
    control_hubs="on",
    on_straggler="restart-without",
    straggler_threshold=2.0,
    straggler_window=30,
    fusion_threshold_mb=32,
    cycle_time_ms=3.5,
    cache_capacity=2048,
    hierarchical_allreduce=True,
    hierarchical_allgather=False,
    autotune=True,
    autotune_log_file="/tmp/at.csv",
    timeline_filename="/tmp/tl.json",
    timeline_mark_cycles=True,
    hvd_log_level="DEBUG",
    gloo_timeout_seconds=7,
    output_filename="/tmp/out",
)


def test_every_option_lands_in_one_field_golden() -> None:
    spec = build_spec(FULL, Path("/work/job"))
    assert_golden("spec/full.json", json.dumps(spec.to_json(), indent=2) + "\n")
    assert spec.backend is Backend.HOROVODRUN and spec.preflight.gpus is GpuRule.IGNORED
    assert spec.checkpoint is not None and spec.checkpoint.text == "/work/job/ckpts/run1"


def test_defaults_golden_and_round_trip() -> None:
    spec = build_spec(LaunchOptions(script="train.py"), Path("/work/job"))
    assert_golden("spec/defaults.json", json.dumps(spec.to_json(), indent=2) + "\n")
    for s in (spec, build_spec(FULL, Path("/w"))):
        assert LaunchSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_cli_parameters_and_launch_options_match_one_for_one() -> None:
    """What click passes is exactly LaunchOptions: no option is dropped or added on the way,
    and click's defaults are LaunchOptions' defaults."""
    fields = {f.name: f for f in dataclasses.fields(LaunchOptions)}
    # how to run or show, not the launch (-v/-q: added to every command by the group)
    display = ("dry_run", "from_run", "console_ranks", "json_out", "verbose", "quiet",
               "mpi_args_line",  # --mpi-args "...": its words join mpi_args (--mpi-arg)
               "env_plain",  # --env-plain: its variables join env, marked plain
               "requeue")  # what the CLI process does on SIGUSR1 (the Slurm batch job's)
    params = {p.name: p for p in command.params if p.name not in display}
    assert set(params) == set(fields)
    for name, param in params.items():
        default = fields[name].default
        if default is dataclasses.MISSING or param.multiple or name == "script_args":
            continue
        given = param.default
        if getattr(given, "name", None) == "UNSET":  # click 8.3: no default at all
            given = False if getattr(param, "is_bool_flag", False) else None
        assert given == default, name


def test_unreadable_recorded_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="version"):
        LaunchSpec.from_json({"version": 99, "script": "x.py"})
    with pytest.raises(UsageError, match="cannot be read"):
        LaunchSpec.from_json({"version": 1, "script": "x.py", "backend": "pbsdsh"})


@pytest.mark.parametrize(
    ("script", "args", "module", "want"),
    [
        ("train.py", ("--epochs", "3"), None, (Entry.SCRIPT, "train.py", ("--epochs", "3"), None)),
        ("--epochs", ("3",), "pkg.train", (Entry.MODULE, "pkg.train", ("--epochs", "3"), None)),
        ("python", ("train.py", "-e", "1"), None, (Entry.SCRIPT, "train.py", ("-e", "1"), None)),
        ("python3", ("-u", "-m", "pkg.train", "x"), None,
         (Entry.MODULE, "pkg.train", ("x",), None)),
        ("/opt/venv/bin/python3.11", ("t.py",), None,
         (Entry.SCRIPT, "t.py", (), "/opt/venv/bin/python3.11")),
        ("./run.sh", ("a",), None, (Entry.SCRIPT, "./run.sh", ("a",), None)),  # CLI tells later
    ],
)
def test_the_command_as_horovodrun_users_write_it(
    script: str, args: tuple[str, ...], module: str | None,
    want: tuple[Entry, str, tuple[str, ...], str | None],
) -> None:
    spec = build_spec(LaunchOptions(script=script, script_args=args, module=module), Path("/w"))
    assert (spec.entry, spec.script, spec.script_args, spec.python) == want


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (None, (), "no training script"),
        ("python", (), "not an interpreter"),
        ("python", ("-c", "print(1)"), "not an interpreter"),
    ],
)
def test_what_is_not_a_training_command_is_refused(
    script: str | None, args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        build_spec(LaunchOptions(script=script, script_args=args), Path("/w"))


def test_mpi_args_are_refused_where_no_mpirun_reads_them() -> None:
    with pytest.raises(UsageError, match="--mpi-arg"):
        build_spec(LaunchOptions(script="t.py", mpi_args=("-mca", "x", "y"), backend="srun"),
                   Path("/w"))
    spec = build_spec(LaunchOptions(script="t.py", mpi_args=("--report-bindings",)), Path("/w"))
    assert spec.mpi_args == ("--report-bindings",)


def test_control_hubs_reads_the_flags_words_and_a_bool() -> None:
    """``--control-hubs auto|on|off``, or from ringtrain.run() a bool; anything else is
    refused with the choices, never taken for auto."""
    def hubs(value: object) -> bool | None:
        opts = LaunchOptions(script="train.py", control_hubs=value)  # type: ignore[arg-type]
        return build_spec(opts, Path("/w")).supervision.control_hubs

    assert [hubs(v) for v in ("auto", "on", "off", True, False)] == [None, True, False, True,
                                                                      False]
    with pytest.raises(UsageError, match="control hubs 'yes': choose auto, on or off"):
        hubs("yes")
    with pytest.raises(UsageError):
        hubs(1)
