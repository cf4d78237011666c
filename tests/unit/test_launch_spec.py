"""build_spec: the launch options -> one LaunchSpec (golden), its JSON round trip, and the
CLI's parameters matching LaunchOptions one for one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ringtrain.cli.launch_cmd import command
from ringtrain.cli.launch_spec import LaunchOptions, build_spec
from ringtrain.errors import UsageError
from ringtrain.spec import Backend, EnvSpec, GpuRule, LaunchSpec
from tests.golden import assert_golden

FULL = LaunchOptions(
    script="train.py",
    script_args=("--epochs", "3"),
    hosts_file="hosts/cluster.yaml",
    np=8,
    backend="horovodrun",
    gloo=True,
    env=(EnvSpec("NCCL_DEBUG"), EnvSpec("MODE", "fast")),
    ssh_config=Path("/etc/rt/ssh_config"),
    known_hosts=Path("/etc/rt/known_hosts"),
    gpu_mode="ignored",
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
    start_timeout=60,
    stall_timeout=300,
    heartbeat_timeout=5,
)


def test_every_option_lands_in_one_field_golden() -> None:
    spec = build_spec(FULL, Path("/work/job"))
    assert_golden("spec/full.json", json.dumps(spec.to_json(), indent=2) + "\n")
    assert spec.backend is Backend.HOROVODRUN and spec.preflight.gpus is GpuRule.IGNORED
    assert spec.checkpoint is not None and spec.checkpoint.url == "/work/job/ckpts/run1"


def test_defaults_golden_and_round_trip() -> None:
    spec = build_spec(LaunchOptions(script="train.py"), Path("/work/job"))
    assert_golden("spec/defaults.json", json.dumps(spec.to_json(), indent=2) + "\n")
    for s in (spec, build_spec(FULL, Path("/w"))):
        assert LaunchSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_cli_parameters_and_launch_options_match_one_for_one() -> None:
    """What click passes is exactly LaunchOptions: no option is dropped or added on the way,
    and click's defaults are LaunchOptions' defaults."""
    fields = {f.name: f for f in dataclasses.fields(LaunchOptions)}
    display = ("dry_run", "from_run", "console_ranks")  # how to run or show, not the launch
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
