"""The SSH farm for scale runs (issue 14): many simulated hosts in one process, reached through
ringtrain's real SSH path (strict host keys from the known_hosts it writes, its ssh_config),
answering the probe and the reaper from its table; a wrong host key is still refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.supervise.teardown import reaper_argv
from ringtrain.probe.hostprobe import GpuStatus, probe
from ringtrain.remote.ssh import SshRemote
from ringtrain.sim import sshfarm

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
N = 12


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[Path]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringtrain.sim.sshfarm", "--hosts", str(N), "--dir",
         str(tmp_path / "farm"), "--fail-every", "5", "--net", str(100 + os.getpid() % 150)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"READY {N}")
        yield tmp_path / "farm"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_probe_and_the_reaper_reach_every_simulated_host(farm: Path) -> None:
    inventory = Inventory(tuple(Host(sshfarm.name(i), 8) for i in range(N)))
    remote = SshRemote(farm / "ssh_config", farm / "known_hosts")
    report = probe(inventory, remote, python=sys.executable, timeout=60)
    assert all(r.reachable for r in report.results), [r.error for r in report.results]
    assert [r.hostname for r in report.results] == [sshfarm.name(i) for i in range(N)]
    failed = [r.host for r in report.results if r.gpu.status is GpuStatus.FAILED]
    assert failed == [sshfarm.name(4), sshfarm.name(9)]  # every 5th: a lost GPU
    ok = report.result(sshfarm.name(0))
    assert len(ok.gpus) == 8 and ok.versions.horovod == "0.28.1"
    answers = remote.run_each([(h, reaper_argv(sys.executable, "r1", {}))
                               for h in inventory.hosts], 30)
    assert all(a.exit_code == 0 and '"left": []' in a.stdout for a in answers.values())


def test_a_changed_host_key_is_refused_by_the_farm_too(farm: Path, tmp_path: Path) -> None:
    lines = (farm / "known_hosts").read_text().splitlines()
    lines[0], lines[1] = lines[0].split()[0] + " " + " ".join(lines[1].split()[1:]), lines[1]
    (tmp_path / "wrong_known_hosts").write_text("\n".join(lines) + "\n")
    remote = SshRemote(farm / "ssh_config", tmp_path / "wrong_known_hosts")
    hosts = (Host(sshfarm.name(0), 8), Host(sshfarm.name(1), 8))
    report = probe(Inventory(hosts), remote, python=sys.executable, timeout=60)
    first, second = report.results
    assert not first.reachable and "host key" in (first.error or "").lower(), first.error
    assert second.reachable


def test_horovodruns_own_ssh_check_passes_over_the_farm(farm: Path) -> None:
    """The scale benchmark's anchor: Horovod's check, OpenSSH's ssh, the farm's keys; nothing
    written to the user's known_hosts."""
    pytest.importorskip("horovod")
    from ringtrain.bench.launcher.scale import horovod_ssh_check

    user_known = Path("~/.ssh/known_hosts").expanduser()
    before = user_known.read_bytes() if user_known.exists() else None
    got = horovod_ssh_check(N, farm)
    assert got.get("horovod_check_ok") is True, got
    assert got["horovod_check_failed_hosts"] == 0 and got["horovod_check_cpu_ms_per_host"] > 0
    assert (user_known.read_bytes() if user_known.exists() else None) == before
