"""The doctor on the simulated cluster, over SSH: faults made with ``ringtrain sim gpu-fault``
are named by ``ringtrain check --doctor`` with their codes on the right host and GPU, and
``ringtrain launch --on-bad-host exclude`` runs the job without the sick hosts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

HOSTS = f"{G1}:4,{G2}:4,{G3}:4,{G4}:4"
FAULTS = [  # (host, gpu, sim gpu-fault flags)
    (G2, 1, ["--pcie-width", "8"]),
    (G2, 2, ["--slowdown", "power-brake"]),
    (G3, 0, ["--xid", "79"]),
    (G3, 3, ["--remap-pending"]),
    (G4, 0, ["--ib-port-down"]),
]


def sim_cli(cluster: Any, *args: str) -> None:
    result = CliRunner().invoke(cli, ["sim", *args, "--name", cluster.name,
                                      "--state-dir", str(cluster.state_dir)])
    assert result.exit_code == 0, result.output


@pytest.fixture()
def sick(sim_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # no baselines from the session's earlier checks: the Xid counts since boot here
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for host, gpu, flags in FAULTS:
        sim_cli(sim_cluster, "gpu-fault", host, "--gpu", str(gpu), *flags)
    try:
        yield sim_cluster
    finally:
        for host in (G2, G3, G4):
            sim_cli(sim_cluster, "gpu-fault", host, "--clear")


def check(cluster: Any, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["check", "-H", HOSTS, "--ssh-config",
                                      str(cluster.ssh_config), "--json", "--timeout", "30",
                                      *extra])
    assert result.stdout.strip().startswith("{"), result.output
    return result.exit_code, json.loads(result.stdout)


def test_check_doctor_names_each_fault_with_its_code_host_and_gpu(sick: Any) -> None:
    code, data = check(sick, "--doctor")
    got = {h["host"]: [(f["code"], f["gpu"], f["action"]) for f in h["findings"]]
           for h in data["hosts"]}
    assert got == {
        G1: [],
        G2: [("pcie-width", 1, "warn"), ("clock-slowdown", 2, "warn")],
        G3: [("row-remap-pending", 3, "fail"), ("xid-fatal", 0, "fail")],
        G4: [("ib-port-down", None, "fail")],
    }
    assert code == 4 and data["refused"]
    f = next(f for h in data["hosts"] if h["host"] == G3 for f in h["findings"]
             if f["code"] == "xid-fatal")
    assert f["measured"] == "Xid 79 since boot" and f["fix"].startswith("reset the GPU")


def test_check_takes_each_codes_action(sick: Any) -> None:
    code, data = check(sick, "--on-bad-host", "exclude,pcie-width=exclude",
                       "--on-bad-host", "ib-port-down=warn")
    status = {h["host"]: h["status"] for h in data["hosts"]}
    assert status == {G1: "ok", G2: "excluded", G3: "excluded", G4: "warn"}
    assert code == 0 and data["usable_slots"] == {G1: 4, G4: 4}


def test_the_table_shows_the_code_and_the_fix(sick: Any) -> None:
    result = CliRunner().invoke(cli, ["check", "-H", HOSTS, "--ssh-config",
                                      str(sick.ssh_config), "--doctor"])
    assert result.exit_code == 4
    out = " ".join(result.stdout.split())
    for text in ("pcie-width", "PCIe x8", "xid-fatal", "Xid 79 since boot", "ib-port-down",
                 "mlx5_0/1 (eth0) is DOWN", "4 of 4 hosts" if False else "3 of 4 hosts"):
        assert text in out, text


SCRIPT = """\
import os, socket
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)
print("HOST", hvd.rank(), socket.gethostname(), int(total.numpy()), flush=True)
"""


def test_launch_on_bad_host_exclude_leaves_the_sick_hosts_out(sick: Any, tmp_path: Path
                                                               ) -> None:
    script = tmp_path / "where.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "-H", f"{G1}:2,{G2}:2,{G3}:2,{G4}:2", "--ssh-config", str(sick.ssh_config),
         "--known-hosts", str(sick.known_hosts), "--on-bad-host", "exclude", str(script)],
        capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    hosts = sorted({line.split()[3] for line in proc.stdout.splitlines()
                    if line.startswith("[") and " HOST " in line})
    assert hosts == [G1, G2]
    assert "[xid-fatal] GPU 0 Xid 79 since boot" in proc.stderr
    assert "[ib-port-down]" in proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    result = json.loads((run / "result.json").read_text())
    text = json.dumps(result)
    assert "xid-fatal" in text and "ib-port-down" in text


def test_xid_since_the_last_check_and_a_fatal_one_until_a_clean_check(
        sim_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        sim_cli(sim_cluster, "gpu-fault", G2, "--gpu", "0", "--xid", "13")
        sim_cli(sim_cluster, "gpu-fault", G3, "--gpu", "0", "--xid", "79")

        def findings() -> dict[str, list[tuple[str, str]]]:
            _, data = check(sim_cluster, "--doctor")
            return {h["host"]: [(f["code"], f["measured"]) for f in h["findings"]]
                    for h in data["hosts"] if h["findings"]}

        assert findings() == {G2: [("xid", "Xid 13 since boot")],
                              G3: [("xid-fatal", "Xid 79 since boot")]}
        # gpu02's check was clean of fatal findings: its Xid 13 is now behind the baseline;
        # gpu03's was not, so its Xid 79 stays fatal, still counted since boot
        assert findings() == {G3: [("xid-fatal", "Xid 79 since boot")]}
        sim_cli(sim_cluster, "gpu-fault", G2, "--gpu", "1", "--xid", "31")
        assert findings() == {G2: [("xid", "Xid 31 since the last check")],
                              G3: [("xid-fatal", "Xid 79 since boot")]}
    finally:
        for host in (G2, G3):
            sim_cli(sim_cluster, "gpu-fault", host, "--clear")


LOOP = """\
import os, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
while True:
    hvd.allreduce(tf.constant([1.0]))
    time.sleep(0.1)
"""


def test_a_second_job_on_the_same_hosts_hears_of_the_first(sim_cluster: Any, tmp_path: Path
                                                            ) -> None:
    """Two launches on the same slots both ran with no word of it (issue 25): now the second
    one's pre-flight names the first run's ranks on each host."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    first = subprocess.Popen(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "-H", f"{G1}:2,{G2}:2", "--ssh-config", str(sim_cluster.ssh_config),
         "--known-hosts", str(sim_cluster.known_hosts), str(script)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        found: dict[str, list[str]] = {}
        while time.monotonic() < deadline and len(found) < 2:
            time.sleep(2)
            _, data = check(sim_cluster, "--doctor")
            found = {h["host"]: [f["measured"] for f in h["findings"]
                                 if f["code"] == "other-job"] for h in data["hosts"]}
            found = {h: m for h, m in found.items() if m}
        (run,) = (tmp_path / "runs").iterdir()
        assert sorted(found) == [G1, G2]
        assert all(m[0].startswith(f"ranks of run {run.name} (pid ") for m in found.values())
    finally:
        os.killpg(first.pid, signal.SIGINT)
        try:
            first.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
