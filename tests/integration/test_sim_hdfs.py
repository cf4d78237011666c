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
import subprocess
import sys
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
