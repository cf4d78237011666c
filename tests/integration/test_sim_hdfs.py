"""`ringtrain sim up --hdfs`: a real HDFS (ringtrain.sim.minihdfs: Hadoop's MiniDFSCluster) on
the simulated cluster's bridge address. A rank in a host's network namespace writes a file
through ringtrain's checkpoint store and reads it back: the NameNode answers there, and the
DataNode the NameNode sends it to is registered at an address that namespace reaches (not
127.0.0.1, which there is the host's own loopback). `sim down` stops the server by PID.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain import sim
from ringtrain.cli import cli
from ringtrain.sim.hdfsserver import running_hdfs_server
from ringtrain.sim.proc import alive

from .conftest import sim_unavailable

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]

# Run on a sim host: a 3 MiB file (several DataNode packets) up and back, no retries.
ON_HOST = """
import os, sys
from ringtrain.checkpoint import RetryPolicy, open_store
store = open_store(sys.argv[1], retry=RetryPolicy(attempts=1), call_timeout_s=30)
data = os.urandom(3 << 20)
store.put_bytes("ckpt/blob", data)
assert store.read_bytes("ckpt/blob") == data, "the file read back differs"
print("read back on", os.environ["RINGTRAIN_SIM_HOST"])
"""


def test_cli_up_with_hdfs_a_host_writes_and_reads_then_down(tmp_path: Path) -> None:
    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    name, state = f"h{os.getpid()}", tmp_path / "sim"
    up = CliRunner().invoke(cli, ["sim", "up", "--name", name, "--hosts", "1", "--hdfs",
                                  "--no-etc-hosts", "--state-dir", str(state)])
    server = running_hdfs_server(state / "hdfs")
    try:
        assert up.exit_code == 0, up.output
        match = re.search(r"^hdfs \S+: (hdfs://([\d.]+):\d+)/ ", up.output, re.M)
        assert match, up.output
        cluster = sim.load(sim.SimConfig(name=name, state_dir=state))
        assert cluster is not None and match.group(2) == cluster.bridge_address
        assert server is not None and server.url == match.group(1)
        host = cluster.names[0]
        remote = shlex.join(["env", f"PYTHONPATH={REPO}", sys.executable, "-c", ON_HOST,
                             f"{server.url}/t1"])
        done = subprocess.run(cluster.ssh_argv(host, remote), capture_output=True, text=True,
                              timeout=120, check=False)
        assert (done.returncode, done.stdout) == (0, f"read back on {host}\n"), done.stderr
    finally:
        down = CliRunner().invoke(cli, ["sim", "down", "--name", name, "--purge",
                                        "--state-dir", str(state)])
    assert down.exit_code == 0 and f"hdfs {name}: stopped" in down.output, down.output
    assert not alive(server.pid)


@pytest.fixture(scope="module")
def bridge_hdfs(sim_cluster: sim.SimCluster, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[str]:
    """The HDFS of ``sim up --hdfs`` on the shared simulated cluster's bridge: its URL."""
    from ringtrain.sim.hdfsserver import start_hdfs_server, stop_hdfs_server

    state = tmp_path_factory.mktemp("bridge-hdfs")
    server = start_hdfs_server(state, sim_cluster.bridge_address)
    try:
        yield server.url
    finally:
        stop_hdfs_server(state)


def test_the_demo_model_resumes_from_hdfs_on_the_simulated_cluster(
        sim_cluster: sim.SimCluster, bridge_hdfs: str, tmp_path: Path) -> None:
    """The digits model (ringtrain.keras's three lines) on two simulated hosts, rank 0
    committing to the bridge's HDFS every epoch: it fails at epoch 4, a second launch resumes
    from epoch 3, read back from HDFS."""
    from ringtrain.checkpoint import list_checkpoints, open_store
    from tests.integration.simnames import G1, G2

    url = f"{bridge_hdfs}/demo-{tmp_path.name}"
    digits = REPO / "ringtrain" / "models" / "digits.py"

    def launch(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
             "-H", f"{G1}:1,{G2}:1", "--ssh-config", str(sim_cluster.ssh_config),
             "--known-hosts", str(sim_cluster.known_hosts), "--checkpoint", url, str(digits),
             "--epochs", "5", *extra],
            cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
            capture_output=True, text=True, timeout=300, check=False)

    first = launch("--fail-at-epoch", "4")
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    assert "fault injection: exiting at epoch 4" in first.stdout
    store = open_store(url)
    assert [(c.step, c.ok) for c in list_checkpoints(store, deep=True)] == [
        (69, True), (46, True), (23, True)]
    second = launch()
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from epoch 3 step 69" in second.stdout
    assert "Epoch 4/5" in second.stdout and "Epoch 1/5" not in second.stdout
    assert [c.step for c in list_checkpoints(store)] == [115, 92, 69]


def test_a_horovod_docs_script_resumes_from_hdfs_on_the_simulated_cluster(
        sim_cluster: sim.SimCluster, bridge_hdfs: str, tmp_path: Path) -> None:
    """Issue 26: Horovod's tf.keras example with the three ringtrain.keras lines, 2 ranks on 2
    simulated hosts, committing every epoch to the HDFS on the bridge; rank 1 (on the second
    host) killed after the first commit, --max-restarts 1: the restart resumes from the newest
    committed epoch, read back from HDFS, and both ranks end with identical weights."""
    from ringtrain.checkpoint import list_checkpoints, open_store
    from tests.integration.procs import killed_on_failure, results_by_rank, run_result
    from tests.integration.simnames import G1, G2

    url = f"{bridge_hdfs}/digits-{tmp_path.name}"
    script = REPO / "tests" / "integration" / "user_scripts" / "keras_mnist_style.py"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "-H", f"{G1}:1,{G2}:1", "--ssh-config", str(sim_cluster.ssh_config),
         "--known-hosts", str(sim_cluster.known_hosts), "--checkpoint", url,
         "--max-restarts", "1", str(script), "6"],
        cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = open_store(url)
    with killed_on_failure(proc):
        deadline = time.monotonic() + 240
        while not list_checkpoints(store):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint committed in 240 s"
            time.sleep(0.5)
        (rank,) = [pid for pid, cmd in sim.host_processes(sim_cluster.config, G2)
                   if "ringtrain.rank.entry" in cmd and "orted" not in cmd]
        os.kill(rank, signal.SIGKILL)
        out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    first, second = run_result(tmp_path)["attempts"]
    assert first["state"] == "failed" and second["state"] == "succeeded"
    final = results_by_rank(out)
    assert set(final) == {0, 1} and final[0]["checksum"] == final[1]["checksum"]
    assert final[0]["initial_epoch"] >= 1, out[-2000:]  # resumed from HDFS, not started over
    assert f"ringtrain: resumed from epoch {final[0]['initial_epoch']}" in out
    newest = list_checkpoints(store)[0]
    assert newest.ok and newest.manifest is not None and newest.manifest.epoch == 6
