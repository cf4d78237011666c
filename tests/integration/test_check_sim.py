"""`ringtrain check` on the simulated cluster: each fault gives the right row and exit code.

Uses the ``sim_cluster`` fixture from tests/integration/conftest.py when there is one; until then
it builds its own small cluster (name ``rtchk``) with the public ringtrain.sim API.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from tests.integration.simnames import G1, G2, G3, G4

pytestmark = [
    pytest.mark.ssh,
    pytest.mark.skipif(os.geteuid() != 0, reason="the simulated cluster needs root"),
]

sim = pytest.importorskip("ringtrain.sim")


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    try:
        yield request.getfixturevalue("sim_cluster")
        return
    except pytest.FixtureLookupError:
        pass
    cfg = sim.SimConfig(name="rtchk", hosts=4, gpus_per_host=4,
                        state_dir=tmp_path_factory.mktemp("sim") / "rtchk")
    built = sim.up(cfg)
    try:
        yield built
    finally:
        sim.down(cfg, purge=True)


def check(cluster: Any, *extra: str) -> tuple[int, dict[str, Any], str]:
    spec = ",".join(f"{n}:4" for n in cluster.names[:4])
    result = CliRunner().invoke(cli, ["check", "-H", spec, "--ssh-config", str(cluster.ssh_config),
                                      "--json", "--timeout", "20", *extra])
    data = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, data, result.stderr


def row(data: dict[str, Any], host: str) -> dict[str, Any]:
    return next(h for h in data["hosts"] if h["host"] == host)


def others_ok(data: dict[str, Any], bad: str) -> bool:
    return all(h["status"] == "ok" for h in data["hosts"] if h["host"] != bad)


def test_healthy_cluster_passes(cluster: Any) -> None:
    code, data, err = check(cluster)
    assert code == 0, err
    assert [h["status"] for h in data["hosts"]] == ["ok"] * 4
    assert data["network"]["include"] == [cluster.subnet]
    assert data["network"]["env"]["NCCL_SOCKET_IFNAME"] == "eth0"


def test_host_with_two_gpus_instead_of_four(cluster: Any) -> None:
    sim.set_gpus(cluster.config, G3, 2)
    try:
        code, data, err = check(cluster)
        assert code == 4
        assert row(data, G3)["status"] == "failed"
        assert row(data, G3)["problems"] == [
            "expected 4 GPUs, nvidia-smi saw 2; fix the host or pass --on-bad-host exclude"]
        assert others_ok(data, G3)
        assert f"{G3}: expected 4 GPUs, nvidia-smi saw 2" in err
        code, data, _ = check(cluster, "--on-bad-host", "exclude", "-np", "12")
        assert code == 0 and row(data, G3)["status"] == "excluded"
        assert data["usable_slots"] == {G1: 4, G2: 4, G4: 4}
    finally:
        sim.set_gpus(cluster.config, G3, 4)


def test_host_whose_driver_fails(cluster: Any) -> None:
    sim.set_gpus(cluster.config, G2, "fail")
    try:
        code, data, _ = check(cluster)
        assert code == 4 and row(data, G2)["status"] == "failed"
        assert row(data, G2)["gpu_status"] == "failed"
        assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" in (
            row(data, G2)["problems"][0])
        assert others_ok(data, G2)
    finally:
        sim.set_gpus(cluster.config, G2, "ok")


def test_host_whose_sshd_is_stopped(cluster: Any) -> None:
    sim.stop_sshd(cluster.config, G4)
    try:
        code, data, _ = check(cluster)
        assert code == 4
        r = row(data, G4)
        assert (r["status"], r["reachable"]) == ("failed", False)
        address = cluster.addresses[G4]
        assert r["problems"][0].startswith(
            f"unreachable: connection refused by {address}:22 (is sshd running?)")
        assert others_ok(data, G4)
    finally:
        sim.start_sshd(cluster.config, G4)


def test_host_whose_key_changed_is_refused_even_with_accept_new(cluster: Any) -> None:
    before = Path(cluster.known_hosts).read_text()
    sim.rotate_host_key(cluster.config, G1)
    try:
        for extra in ((), ("--accept-new-host-keys",)):
            code, data, _ = check(cluster, *extra)
            assert code == 4
            r = row(data, G1)
            assert r["status"] == "failed" and not r["reachable"]
            assert f"host key for {G1} CHANGED (possible MITM): fix known_hosts" in r["problems"][0]
            assert others_ok(data, G1)
        assert Path(cluster.known_hosts).read_text() == before
    finally:
        sim.rotate_host_key(cluster.config, G1, update_known_hosts=True)


def test_host_reporting_another_horovod(cluster: Any) -> None:
    sim.set_versions(cluster.config, G2, horovod="0.27.0")
    try:
        code, data, err = check(cluster)
        assert code == 4
        assert row(data, G2)["problems"] == [
            "horovod 0.27.0 (others 0.28.1+ringtrain.4); fix the host or pass --on-bad-host "
            "exclude"]
        assert others_ok(data, G2)
        assert err.count("horovod") == 1  # a diff naming the odd host, not a dump of all
    finally:
        sim.clear_versions(cluster.config, G2)


def test_a_gpu_host_that_would_train_on_its_cpu_is_refused(cluster: Any) -> None:
    """The sim's hosts run tensorflow-cpu and a Horovod built without NCCL under fake GPUs,
    and declare it. Without that declaration G4 is what it would be on a real cluster: a GPU
    host whose job would silently train on the CPU."""
    sim.declare_cpu_training(cluster.config, G4, False)
    try:
        code, data, err = check(cluster)
        assert code == 4, err
        problems = row(data, G4)["problems"]
        assert problems[0].startswith("[tf-cpu-build] tensorflow-cpu 2.15.1 on a host with 4 "
                                      "GPUs (expected a TensorFlow that sees the GPUs); "
                                      "install TensorFlow's GPU build"), problems
        assert problems[1].startswith("[hvd-no-nccl] horovod 0.28.1+ringtrain.4 built without "
                                      "NCCL"), problems
        assert others_ok(data, G4)
        code, data, _ = check(cluster, "--on-bad-host", "tf-cpu-build=warn,hvd-no-nccl=warn")
        assert code == 0 and row(data, G4)["status"] == "warn"
        code, data, _ = check(cluster, "--cpu")  # a CPU job: GPUs, and so their stack, not judged
        assert code == 0 and row(data, G4)["status"] == "ok"
    finally:
        sim.declare_cpu_training(cluster.config, G4, True)
