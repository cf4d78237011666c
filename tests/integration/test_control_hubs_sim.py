"""Per-host hubs (``--control-hubs on``, rank/hub.py, issue 41) on the simulated cluster: two
hosts of two ranks, each host's ranks speaking to the launcher through one hub. Supervision
names what it names without hubs: a stopped rank as that rank while its host answers, a cut
host as a lost host; and nothing of the job (ranks, daemons, hubs) is left on any host.

The script is a plain Python loop that reports progress (supervision needs no Horovod): the
cost is the launch and the fault, not TensorFlow's import on two shared cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.rank import procfs
from tests.integration.procs import read_until, run_result
from tests.integration.simnames import G1, G2

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

LOOP = """\
import os, time
from ringtrain.rank import progress
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
step = 0
while True:
    step += 1
    if rank == 0 and step % 10 == 0:
        progress.report(epoch=1, step=step)
        print("step", step, flush=True)
    time.sleep(0.05)
"""
JOB = ("ringtrain.rank.entry", "orted", "ringtrain.rank.hub")


def _start(cluster: sim.SimCluster, tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    return subprocess.Popen(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "-H", f"{G1}:2,{G2}:2", "--ssh-config", str(cluster.ssh_config),
         "--known-hosts", str(cluster.known_hosts), "--heartbeat-timeout", "5",
         "--control-hubs", "on", "--cpu", str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _processes(cluster: sim.SimCluster, host: str, what: str) -> list[int]:
    return [pid for pid, cmd in sim.host_processes(cluster.config, host)
            if what in cmd and (what != JOB[0] or "orted" not in cmd)]


def _rank_of(pid: int) -> int:
    env = procfs.read(f"/proc/{pid}/environ").split(b"\0")
    (value,) = [e.split(b"=", 1)[1] for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
    return int(value)


def _nothing_left(cluster: sim.SimCluster, timeout: float = 30) -> None:
    def left() -> dict[str, list[int]]:
        return {h: found for h in (G1, G2)
                if (found := [p for what in JOB for p in _processes(cluster, h, what)])}

    deadline = time.monotonic() + timeout
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left() == {}


def test_a_stopped_rank_behind_a_hub_is_named_as_that_rank(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = _start(sim_cluster, tmp_path)
    try:
        read_until(proc, "step 20")
        # one hub a host, speaking for both of its ranks
        assert [len(_processes(sim_cluster, h, JOB[2])) for h in (G1, G2)] == [1, 1]
        ranks = {_rank_of(pid): pid for pid in _processes(sim_cluster, G2, JOB[0])}
        assert sorted(ranks) == [2, 3]
        os.kill(ranks[3], signal.SIGSTOP)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = run_result(tmp_path)
    assert proc.returncode == 22, err[-2000:]
    assert result["fault_kind"] == "rank-silent" and result["failed_rank"] == 3, err[-2000:]
    assert result["fault_hosts"] == [G2]
    _nothing_left(sim_cluster)


def test_a_cut_host_behind_a_hub_is_named_as_a_lost_host(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = _start(sim_cluster, tmp_path)
    try:
        read_until(proc, "step 20")
        cut = time.time()
        sim.set_link(sim_cluster.config, G2, up=False)
        _, err = proc.communicate(timeout=90)
    finally:
        sim.set_link(sim_cluster.config, G2, up=True)
        if proc.poll() is None:
            proc.kill()
    result = run_result(tmp_path)
    assert proc.returncode == 21, err[-2000:]
    assert result["fault_kind"] == "host-lost" and result["fault_hosts"] == [G2], err[-2000:]
    assert sorted(r["rank"] for r in result["failure"]["ranks"]) == [2, 3]
    assert result["detected_at"] - cut < 25  # heartbeat timeout 5 s
    # gpu02's ranks and hub end themselves: their launcher is silent past 7 s
    _nothing_left(sim_cluster)
