"""`ringtrain launch` from a PBS job environment, on the simulated SSH cluster.

No PBS server can be installed here, so the job environment is synthesized the way PBS writes
it: ``PBS_JOBID``, ``PBS_O_WORKDIR`` and ``PBS_NODEFILE`` listing one short host name per MPI
process in chunk order (``select=2:ncpus=4:mpiprocs=2`` -> gpu02 twice, then gpu04 twice).
Everything after that is real: the SSH probe of each host and mpirun across the namespaces.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.simnames import G1, G2, G3, G4

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

WHERE = """\
import socket
from mpi4py import MPI
c = MPI.COMM_WORLD
print("RANK", c.rank, c.size, socket.gethostname(), c.allreduce(c.rank), flush=True)
"""


def _pbs_env(tmp_path: Path, nodefile: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env.update(PBS_JOBID="4711.pbs-server", PBS_NODEFILE=str(nodefile),
               PBS_O_WORKDIR=str(tmp_path), PBS_ENVIRONMENT="PBS_BATCH", PBS_JOBNAME="where")
    return env


def _launch_in_pbs(cluster: sim.SimCluster, tmp_path: Path, job: str, nodes: str,
                   timeout: float) -> tuple[subprocess.CompletedProcess[str], str, Path]:
    """`ringtrain launch where.py` with no hosts given, inside PBS job ``job`` whose nodefile
    holds ``nodes``; (process, stdout+stderr, nodefile)."""
    nodefile = tmp_path / job
    nodefile.write_text(nodes)
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "--ssh-config", str(cluster.ssh_config), "--known-hosts",
            str(cluster.known_hosts), str(script)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=tmp_path, env=_pbs_env(tmp_path, nodefile))
    return proc, proc.stdout + proc.stderr, nodefile


def test_launch_reads_the_pbs_nodefile(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc, output, nodefile = _launch_in_pbs(sim_cluster, tmp_path, "4711.pbs-server",
                                            f"{G2}\n{G2}\n{G4}\n{G4}\n", 240)
    assert proc.returncode == 0, output[-4000:]
    assert f"inside pbs job 4711.pbs-server: 2 node(s), 4 slots (PBS_NODEFILE={nodefile})" in output
    ranks = sorted(line.split("RANK ", 1)[1] for line in proc.stdout.splitlines()
                   if "RANK " in line)
    assert ranks == [f"0 4 {G2} 6", f"1 4 {G2} 6", f"2 4 {G4} 6", f"3 4 {G4} 6"]
    assert G1 not in output and G3 not in output  # only the job's nodes were used


def test_pbs_nodefile_naming_an_unknown_host_fails_the_probe(sim_cluster: sim.SimCluster,
                                                             tmp_path: Path) -> None:
    proc, output, _ = _launch_in_pbs(sim_cluster, tmp_path, "4712.pbs-server",
                                     f"{G1}\nnode-not-in-this-cluster\n", 120)
    assert proc.returncode == 4, output[-3000:]
    assert "node-not-in-this-cluster" in output and "fix:" in output
