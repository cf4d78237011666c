"""``ringtrain launch --elastic`` on the simulated cluster (issue 24, item 2): Horovod's own
elastic driver and elastic Keras example, real ranks on three hosts, one of them killed.

The launch runs from gpu01, as horovodrun is run from a node of the cluster: Horovod's Gloo
rendezvous listens on the launcher's address of the interface the hosts share (eth0), which
this machine lacks. Its ssh to gpu02 and gpu03 is ringtrain's shim (strict host keys).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.procs import run_result

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
SCRIPT = Path(__file__).parent / "user_scripts" / "keras_elastic_style.py"


def _rank_pid(cluster: sim.SimCluster, host: str) -> int | None:
    pids = [pid for pid, cmd in sim.host_processes(cluster.config, host)
            if cmd.startswith(sys.executable) and "ringtrain.rank.entry" in cmd]
    return pids[0] if pids else None


def _job_processes(cluster: sim.SimCluster) -> dict[str, list[str]]:
    found = {h: [c for _, c in sim.host_processes(cluster.config, h) if "ringtrain.rank" in c]
             for h in cluster.names}
    return {h: cmds for h, cmds in found.items() if cmds}


def test_elastic_keeps_training_through_a_killed_rank(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "--elastic", "--min-np", "2", "-H", "gpu01:1,gpu02:1,gpu03:1",
            "--ssh-config", str(sim_cluster.ssh_config),
            "--known-hosts", str(sim_cluster.known_hosts), str(SCRIPT), "14"]
    on_gpu01 = sim_cluster.ssh_argv("gpu01", f"cd {shlex.quote(str(tmp_path))} && "
                                    + shlex.join(argv))
    proc = subprocess.Popen(on_gpu01, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out: list[str] = []
    err: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    readers = [threading.Thread(target=lambda s=s, sink=sink: sink.extend(s), daemon=True)
               for s, sink in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any("EPOCH 2 size=3" in line for line in out):
            assert proc.poll() is None, "".join(err)[-3000:]
            assert time.monotonic() < deadline, "".join(out + err)[-3000:]
            time.sleep(0.2)
        pid = _rank_pid(sim_cluster, "gpu03")
        assert pid is not None, sim.host_processes(sim_cluster.config, "gpu03")
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    stdout, stderr = "".join(out), "".join(err)
    assert proc.returncode == 0, stderr[-4000:]
    assert re.search(r"elastic: rank \d on gpu03 ended before its script returned", stderr), (
        stderr[-3000:])
    assert "RESET size=2" in stdout, stdout[-3000:]
    results = [line.split("RESULT ", 1)[1] for line in stdout.splitlines() if "RESULT " in line]
    assert len(results) == 2 and all('"size": 2' in r and '"epoch": 14' in r for r in results), (
        stdout[-3000:])
    result = run_result(tmp_path)
    assert result["state"] == "succeeded"
    (absorbed,) = result["attempts"][0]["absorbed"]
    assert absorbed["host"] == "gpu03" and absorbed["why"].startswith("ended before")
    deadline = time.monotonic() + 30
    while _job_processes(sim_cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_processes(sim_cluster) == {}
