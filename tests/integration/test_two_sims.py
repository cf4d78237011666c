"""Two simulated clusters up at once: each names its own hosts, each job runs on its own hosts,
and a fault injected into one leaves the other untouched.

The session's cluster (``t<pid>-gpuNN``) and a second one (``u<pid>-gpuNN``) share this
machine's /etc/hosts, where mpirun looks its host names up. Before the names were unique per
cluster, both were called gpu01.., the first block won, and the second cluster's job ran on the
first cluster's hosts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.conftest import sim_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

WHERE = """\
import socket
from mpi4py import MPI
c = MPI.COMM_WORLD
print("RANK", c.rank, socket.gethostname(), c.allreduce(1), flush=True)
"""


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sim.SimCluster]:
    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    cfg = sim.SimConfig(name=f"u{os.getpid()}", hosts=2, gpus_per_host=2,
                        state_dir=tmp_path_factory.mktemp("sim2") / "second")
    cluster = sim.up(cfg)
    try:
        yield cluster
    finally:
        sim.down(cfg, purge=True)


def _start(cluster: sim.SimCluster, hosts: tuple[str, ...], tmp_path: Path,
           tag: str) -> subprocess.Popen[str]:
    script = tmp_path / f"where-{tag}.py"
    script.write_text(WHERE)
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / tag),
            "-H", ",".join(f"{h}:1" for h in hosts), "--ssh-config", str(cluster.ssh_config),
            "--known-hosts", str(cluster.known_hosts), str(script)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, list[list[str]], str]:
    out, err = proc.communicate(timeout=240)
    ranks = sorted(line.split("RANK ", 1)[1].split() for line in out.splitlines()
                   if "RANK " in line)
    return proc.returncode, ranks, out + err


def test_each_cluster_names_its_own_hosts_in_etc_hosts(sim_cluster: sim.SimCluster,
                                                       second: sim.SimCluster) -> None:
    assert set(sim_cluster.names).isdisjoint(second.names)
    for cluster in (sim_cluster, second):
        for host in cluster.names:
            assert socket.gethostbyname(host) == cluster.addresses[host], host


def test_jobs_side_by_side_each_on_its_own_cluster(sim_cluster: sim.SimCluster,
                                                   second: sim.SimCluster,
                                                   tmp_path: Path) -> None:
    mine = sim_cluster.names[:2]
    a = _start(sim_cluster, mine, tmp_path, "a")
    b = _start(second, second.names, tmp_path, "b")
    (rc_a, ranks_a, out_a), (rc_b, ranks_b, out_b) = _finish(a), _finish(b)
    assert rc_a == 0, out_a[-3000:]
    assert rc_b == 0, out_b[-3000:]
    assert ranks_a == [["0", mine[0], "2"], ["1", mine[1], "2"]]
    assert ranks_b == [["0", second.names[0], "2"], ["1", second.names[1], "2"]]


def test_a_fault_in_one_cluster_leaves_the_other_untouched(sim_cluster: sim.SimCluster,
                                                           second: sim.SimCluster,
                                                           tmp_path: Path) -> None:
    broken = second.names[1]
    sim.set_gpus(second.config, broken, "fail")
    sim.set_link(second.config, second.names[0], up=False)
    try:
        mine = sim_cluster.names[:2]
        a = _start(sim_cluster, mine, tmp_path, "a")
        b = _start(second, second.names, tmp_path, "b")
        (rc_a, ranks_a, out_a), (rc_b, _, out_b) = _finish(a), _finish(b)
        assert rc_a == 0, out_a[-3000:]
        assert [r[1] for r in ranks_a] == list(mine)
        assert rc_b == 4, out_b[-3000:]
        assert broken in out_b and second.names[0] in out_b
        assert not any(h in out_b for h in sim_cluster.names)
        healthy = {h.name: h.link_up for h in sim.status(sim_cluster.config).hosts}
        assert healthy == dict.fromkeys(sim_cluster.names, True)
    finally:
        sim.set_link(second.config, second.names[0], up=True)
        sim.set_gpus(second.config, broken, "ok")
