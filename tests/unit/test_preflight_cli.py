"""`ringtrain check` rendering and exit codes, with FakeRemote in place of SshRemote."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.cli.context import CliContext
from ringtrain.probe.hostprobe import probe_argv
from tests.fakes import FakeRemote, gpu_rows, ip_lines, probe_stdout

ARGV = probe_argv(sys.executable)


def fake(**gpus: int) -> FakeRemote:
    remote = FakeRemote()
    for i, (host, n) in enumerate(gpus.items(), start=1):
        remote.on(host, ARGV, stdout=probe_stdout(
            host, gpu=(gpu_rows(n), 0), net=ip_lines(("eth0", f"10.0.0.{i}/24"))))
    return remote


class Cli:
    """``ringtrain`` with a FakeRemote behind the remote factory (the CLI's SSH seam)."""

    def __init__(self) -> None:
        self.remote: FakeRemote | None = None

    def __call__(self, remote: FakeRemote) -> FakeRemote:
        self.remote = remote
        return remote

    def invoke(self, args: list[str]) -> Any:
        remote = self.remote
        assert remote is not None, "install a FakeRemote first"
        obj = CliContext(remote_factory=lambda _options: remote)
        return CliRunner().invoke(cli, args, obj=obj)


@pytest.fixture
def use_remote() -> Cli:
    return Cli()


def test_table_and_exit_code_when_refused(use_remote: Cli) -> None:
    use_remote(fake(gpu01=4, gpu02=2))
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4"])
    assert result.exit_code == 4
    lines = result.stdout.splitlines()
    assert any("gpu01" in ln and " ok " in ln and "4/4" in ln for ln in lines)
    assert any("gpu02" in ln and "failed" in ln and "2/4" in ln for ln in lines)
    assert "error: pre-flight refused the launch: 1 of 2 hosts have problems" in result.stderr
    assert "fix: fix the hosts listed, or pass --on-bad-host exclude" in result.stderr


def test_json_and_exclude(use_remote: Cli) -> None:
    use_remote(fake(gpu01=4, gpu02=2))
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4", "--json",
                                      "--on-bad-host", "exclude"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["refused"] is False and data["usable_slots"] == {"gpu01": 4}
    assert [h["status"] for h in data["hosts"]] == ["ok", "excluded"]
    assert data["hosts"][0]["gpus"][0]["memory_total_mib"] == 81920
    assert data["network"]["mca"]["btl_tcp_if_include"] == "10.0.0.0/24"


def test_min_hosts_refuses_after_exclusion(use_remote: Cli) -> None:
    use_remote(fake(gpu01=4, gpu02=2))
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4", "--on-bad-host",
                                      "exclude", "--min-hosts", "2"])
    assert result.exit_code == 4
    assert "only 1 usable hosts after excluding gpu02, --min-hosts 2" in result.stderr


def test_ok_summary(use_remote: Cli) -> None:
    use_remote(fake(gpu01=4, gpu02=4))
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4", "-np", "8"])
    assert result.exit_code == 0, result.stderr
    assert "ok: a launch would use 2 hosts, 8 slots" in result.stdout


def test_cpu_cluster_passes_like_launch_unless_gpus_are_required(use_remote: Cli) -> None:
    """check applies launch's GPU rule: no host with an NVIDIA driver = a CPU job."""
    remote = FakeRemote()
    for i, host in enumerate(("cpu01", "cpu02"), start=1):
        remote.on(host, ARGV, stdout=probe_stdout(
            host, gpu=("nvidia-smi: command not found", 127),
            net=ip_lines(("eth0", f"10.0.0.{i}/24"))))
    use_remote(remote)
    auto = use_remote.invoke(["check", "-H", "cpu01:2,cpu02:2"])
    assert auto.exit_code == 0, auto.stderr
    assert "no host has an NVIDIA driver: a CPU job" in auto.stderr
    required = use_remote.invoke(["check", "-H", "cpu01:2,cpu02:2", "--gpus"])
    assert required.exit_code == 4
    assert "nvidia-smi not found" in required.stdout + required.stderr


def test_a_network_interface_missing_on_a_host_refuses_with_what_is_there(use_remote: Cli) -> None:
    use_remote(fake(gpu01=4, gpu02=4))
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4", "--network-interface", "ib0"])
    assert result.exit_code == 4
    assert "--network-interface ib0 matches no interface with an address on gpu01, gpu02 " \
           "(gpu01: eth0 10.0.0.1; gpu02: eth0 10.0.0.2)" in result.stderr


def test_check_takes_launchs_selection_and_ssh_defaults(use_remote: Cli) -> None:
    """--include/--exclude/--slots leave hosts out before the probe, as launch does; -p/-i
    reach every host whose line names no port or key (issue 27, item 5)."""
    seen: list[tuple[str, int | None, str | None]] = []

    class Recording(FakeRemote):
        def run(self, hosts: Any, argv: Any, timeout: float) -> Any:
            seen.extend((h.name, h.port, h.identity_file) for h in hosts)
            return super().run(hosts, argv, timeout)

    remote = Recording(answers=fake(gpu01=4, gpu02=4).answers)
    use_remote(remote)
    result = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4,gpu03:4", "--exclude", "gpu03",
                                "--slots", "gpu02=2", "-np", "6", "-p", "2222",
                                "-i", "/k/id", "--json"])
    assert result.exit_code == 0, result.output
    assert seen == [("gpu01", 2222, "/k/id"), ("gpu02", 2222, "/k/id")]  # gpu03 not probed
    refused = use_remote.invoke(["check", "-H", "gpu01:4,gpu02:4", "--slots", "gpu02=2",
                                 "-np", "8"])
    assert refused.exit_code != 0 and "-np 8" in refused.stderr
