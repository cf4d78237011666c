"""--ssh-transport paramiko|openssh: from either door (the flag, the config key, ``ringtrain.run``)
into the spec's SshSpec, through plan.json, and out of the assembly's Remote factory as the
Remote it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import ringtrain
from ringtrain.assembly.remotes import SshOptions, ssh_remote
from ringtrain.cli import cli
from ringtrain.cli.context import CliContext
from ringtrain.errors import UsageError
from ringtrain.probe.hostprobe import probe_argv
from ringtrain.remote.openssh import OpenSshRemote
from ringtrain.remote.ssh import SshRemote
from ringtrain.spec import LaunchSpec, SshSpec
from tests.fakes import FakeRemote, gpu_rows, ip_lines, probe_stdout


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RINGTRAIN_SSH_TRANSPORT", raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def _check(args: list[str], env: dict[str, str] | None = None) -> tuple[int, list[SshOptions]]:
    remote = FakeRemote()
    remote.on("gpu01", probe_argv(sys.executable), stdout=probe_stdout(
        "gpu01", gpu=(gpu_rows(1), 0), net=ip_lines(("eth0", "10.0.0.1/24"))))
    asked: list[SshOptions] = []

    def factory(options: SshOptions) -> FakeRemote:
        asked.append(options)
        return remote

    result = CliRunner().invoke(cli, ["check", "-H", "gpu01:1", *args], env=env,
                                obj=CliContext(remote_factory=factory))
    return result.exit_code, asked


def test_check_hands_the_factory_the_transport_asked(project: Path) -> None:
    code, asked = _check([])
    assert code == 0 and [o.ssh.transport for o in asked] == ["paramiko"]
    code, asked = _check(["--ssh-transport", "openssh", "--known-hosts", "kh"])
    assert code == 0 and [o.ssh.transport for o in asked] == ["openssh"]
    assert asked[0].ssh.known_hosts == Path("kh")
    code, asked = _check([], env={"RINGTRAIN_SSH_TRANSPORT": "openssh"})
    assert code == 0 and [o.ssh.transport for o in asked] == ["openssh"]
    code, asked = _check(["--ssh-transport", "telnet"])
    assert code == 2 and asked == []


def _planned_transport(*extra: str) -> str:
    result = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", *extra,
                                      "-H", "localhost:1", "train.py"])
    assert result.exit_code == 0, result.output
    plan = next(Path().rglob("plan.json"))
    transport: str = json.loads(plan.read_text())["spec"]["ssh"]["transport"]
    plan.unlink()
    return transport


def test_launch_flag_and_config_key_reach_plan_json(project: Path) -> None:
    assert _planned_transport() == "paramiko"
    assert _planned_transport("--ssh-transport", "openssh") == "openssh"
    (project / "ringtrain.toml").write_text('ssh_transport = "openssh"\n')
    assert _planned_transport() == "openssh"
    assert _planned_transport("--ssh-transport", "paramiko") == "paramiko"  # the flag wins


def test_ringtrain_run_takes_it_as_a_keyword(project: Path) -> None:
    plan = ringtrain.run("train.py", hosts="localhost:1", dry_run=True, probe=False,
                         ssh_transport="openssh", runs_dir=str(project / "runs"))
    assert plan.spec.ssh.transport == "openssh"
    with pytest.raises(UsageError, match=r"SSH transport 'telnet': choose paramiko or openssh"):
        ringtrain.run("train.py", hosts="localhost:1", dry_run=True, probe=False,
                      ssh_transport="telnet")


def test_the_factory_builds_the_remote_the_spec_names(tmp_path: Path) -> None:
    assert isinstance(ssh_remote(SshOptions(SshSpec())), SshRemote)
    remote = ssh_remote(SshOptions(SshSpec(known_hosts=tmp_path / "kh", accept_new_host_keys=True,
                                           transport="openssh"), 7.0, 3))
    assert isinstance(remote, OpenSshRemote)
    assert (remote.client.known_hosts, remote.client.accept_new, remote.client.connect_timeout,
            remote.concurrency) == (tmp_path / "kh", True, 7.0, 3)


def test_a_recorded_spec_with_an_unknown_transport_is_refused_where_it_is_used() -> None:
    data = LaunchSpec(script="train.py").to_json()
    data["ssh"]["transport"] = "telnet"
    spec = LaunchSpec.from_json(data)
    with pytest.raises(UsageError, match="choose paramiko or openssh"):
        ssh_remote(SshOptions(spec.ssh))
