"""The config layers as values (assembly/layers.py, pure): typing each value once, paths from
the file that names them, the caller over the layers, the variables for the ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringtrain.assembly.layers import (
    Config,
    EnvEntry,
    Setting,
    convert,
    env_lines,
    env_table,
    fill,
    from_environment,
    from_file,
    merge_env,
)
from ringtrain.errors import UsageError
from ringtrain.spec import EnvSpec

FILE = Path("/proj/ringtrain.toml")


def _config(env: tuple[EnvEntry, ...] = (), **values: Any) -> Config:
    return Config({k: Setting(k, v, str(FILE)) for k, v in values.items()}, FILE.parent, (), env)


def test_paths_in_a_file_are_taken_from_its_folder_and_in_the_environment_as_typed() -> None:
    got = from_file({"hosts": "hosts/gpu.txt", "ssh_config": "ssh/config",
                     "known_hosts": "/etc/ssh/known", "runs_dir": "runs",
                     "env_file": ".env", "checkpoint": "ckpt"}, FILE)
    assert got == {"hosts": "/proj/hosts/gpu.txt", "ssh_config": Path("/proj/ssh/config"),
                   "known_hosts": Path("/etc/ssh/known"), "runs_dir": Path("/proj/runs"),
                   "env_file": Path("/proj/.env"), "checkpoint": "/proj/ckpt"}
    env = from_environment({"RINGTRAIN_RUNS_DIR": "runs", "RINGTRAIN_HOSTS": "gpu.txt",
                            "RINGTRAIN_CHECKPOINT": "ckpt"})
    assert {k: s.value for k, s in env.items()} == {
        "runs_dir": Path("runs"), "hosts": "gpu.txt", "checkpoint": "ckpt"}
    assert env["runs_dir"].source == "RINGTRAIN_RUNS_DIR"


def test_a_host_list_and_a_url_stay_as_written() -> None:
    got = from_file({"hosts": "gpu01:4,gpu02:4", "checkpoint": "s3://bucket/run"}, FILE)
    assert got == {"hosts": "gpu01:4,gpu02:4", "checkpoint": "s3://bucket/run"}
    assert from_file({"checkpoint": "~/ckpt"}, FILE) == {"checkpoint": "~/ckpt"}


def test_env_and_env_file_are_read_from_files_only() -> None:
    # RINGTRAIN_ENV_FILE is the ranks' own variable (the secrets file), not a config key
    assert from_environment({"RINGTRAIN_ENV_FILE": "/x", "RINGTRAIN_ENV": "A=1"}) == {}


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_restarts", "many", "'many' is not an integer"),
    ("max_restarts", -1, "-1 is below the least allowed, 0"),
    ("heartbeat_timeout", 1, "below the least allowed, 2"),
    ("ssh_transport", "telnet", "'telnet' is not one of paramiko, openssh"),
    ("hosts_format", "xml", "'xml' is not one of"),
    ("on_bad_host", "explode", "explode"),
    ("stall_timeout", True, "True is not a number"),
    ("runs_dir", 3, "3 is not a path"),
])
def test_a_bad_value_names_its_layer(key: str, value: Any, words: str) -> None:
    with pytest.raises(UsageError) as err:
        from_file({key: value}, FILE)
    assert err.value.message.startswith(f"{FILE}: {key}: ")
    assert words in err.value.message
    with pytest.raises(UsageError) as err:
        from_environment({f"RINGTRAIN_{key.upper()}": str(value)}) if isinstance(
            value, str) else convert(key, value, f"RINGTRAIN_{key.upper()}", None)
    assert err.value.message.startswith(f"RINGTRAIN_{key.upper()}: ")


def test_what_the_caller_gives_wins_and_none_is_not_given() -> None:
    layers = _config(runs_dir=Path("/proj/runs"), max_restarts=2, stall_timeout=900.0)
    out = fill({"runs_dir": Path("mine"), "max_restarts": None, "np": 4}, layers)
    assert out == {"runs_dir": Path("mine"), "max_restarts": 2, "stall_timeout": 900.0, "np": 4}


@pytest.mark.parametrize("given", [{"host_spec": "gpu01:4"}, {"hosts_file": "other.yaml"}])
def test_a_host_source_the_caller_gives_sets_the_configured_one_aside(
        given: dict[str, str]) -> None:
    out = fill(given, _config(hosts="/proj/hosts.txt", hosts_format="openmpi"))
    assert out == {"hosts_file": None, "hosts_format": None, **given}
    assert fill({}, _config(hosts="/proj/hosts.txt"))["hosts_file"] == "/proj/hosts.txt"
    both = fill({"host_spec": "a:1", "hosts_format": "nodelist"}, _config(hosts="/p/h"))
    assert both["hosts_format"] == "nodelist"


def test_the_configured_env_goes_under_the_callers_name_by_name() -> None:
    env = merge_env([
        ((EnvSpec("A", "user"), EnvSpec("B", "user")), "/home/u/config.toml"),
        ((EnvSpec("B", "project"), EnvSpec("C", "project")), "/proj/ringtrain.toml"),
    ])
    assert [(e.spec.name, e.spec.value, e.source) for e in env] == [
        ("A", "user", "/home/u/config.toml"), ("B", "project", "/proj/ringtrain.toml"),
        ("C", "project", "/proj/ringtrain.toml")]
    out = fill({"env": (EnvSpec("C", "cli"),)}, _config(env=env))
    assert out["env"] == (EnvSpec("A", "user"), EnvSpec("B", "project"), EnvSpec("C", "cli"))
    assert "env" not in fill({}, _config())


def test_env_as_a_table_or_a_list_and_never_a_value_in_an_error() -> None:
    assert env_table({"A": "1", "B": ""}, "f: env") == (EnvSpec("A", "1"), EnvSpec("B", ""))
    assert env_table(["A=1=2", "FWD"], "f: env") == (EnvSpec("A", "1=2"), EnvSpec("FWD"))
    with pytest.raises(UsageError) as err:
        env_table(["9BAD=hunter2"], "f: env")
    assert "'9BAD' is not a valid" in err.value.message and "hunter2" not in str(err.value)
    with pytest.raises(UsageError) as err:
        env_table({"TOKEN": 12345}, "f: env")
    assert "TOKEN: its value is not a string" in err.value.message
    assert "12345" not in err.value.message
    with pytest.raises(UsageError):
        env_table("A=1", "f: env")


def test_an_env_file_is_name_value_lines() -> None:
    text = "# secrets\n\nexport A=1\n  B=two words  \nC=x=y\n"
    assert env_lines(text, ".env") == (EnvSpec("A", "1"), EnvSpec("B", "two words"),
                                       EnvSpec("C", "x=y"))
    with pytest.raises(UsageError) as err:
        env_lines("A=1\nhunter2\n", "/proj/.env")
    assert err.value.message == "/proj/.env:2: not a NAME=value line"
    with pytest.raises(UsageError) as err:
        env_lines("A=1\nBAD-NAME=hunter2\n", "/proj/.env")
    assert err.value.message.startswith("/proj/.env:2: 'BAD-NAME' is not a valid")
    assert "hunter2" not in err.value.message


def test_a_masked_entry_shows_the_name_only() -> None:
    assert EnvEntry(EnvSpec("TOKEN", "s3cret"), "f").masked() == "TOKEN=****"
    assert EnvEntry(EnvSpec("FWD"), "f").masked() == "FWD"
