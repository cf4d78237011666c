"""The re-check before a restart on the simulated cluster (issue 24, item 5).

A rank on gpu02 takes 30 GB of its fake GPU, as a CUDA context does, and crashes. Its memory
stays used for a while after its death (a driver tearing the context down), which the fake
nvidia-smi reproduces. The restart waits for gpu02 to free it and keeps gpu02; when it stays
used past --recheck-timeout, gpu02 sits out and the restart runs without it. Either way the
console says so and result.json's ledger times it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.sim.gpus import clear_holders
from tests.integration.procs import run_result
from tests.integration.simnames import G1, G2

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

HOLD = """\
import os, socket, sys, time
from ringtrain.sim.gpus import hold_memory
attempt, rank = os.environ["RINGTRAIN_ATTEMPT"], os.environ["RANK"]
if attempt == "1" and rank == "1":
    hold_memory(0, 30000, release_s=float(sys.argv[1]))
    sys.exit(3)
time.sleep(3 if attempt == "1" else 0)
print("RAN", attempt, rank, socket.gethostname(), flush=True)
"""


def _launch(cluster: sim.SimCluster, tmp_path: Path, release_s: float,
            timeout_s: float) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "-H", f"{G1}:1,{G2}:1", "--ssh-config", str(cluster.ssh_config),
            "--known-hosts", str(cluster.known_hosts), "--max-restarts", "1", "--min-np", "1",
            "--recheck-timeout", str(timeout_s), str(script), str(release_s)]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    finally:
        clear_holders(sim.cluster(cluster.config).host(G2).gpu_state_file)


def _attempt_hosts(tmp_path: Path, attempt: int) -> list[str]:
    (run_dir,) = (tmp_path / "runs").iterdir()
    plan = json.loads((run_dir / f"attempt-{attempt}" / "plan.json").read_text())
    return [h["name"] for h in plan["hosts"]]


def test_the_restart_waits_for_a_dead_ranks_gpu_memory(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    done = _launch(sim_cluster, tmp_path, release_s=3.0, timeout_s=60.0)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"re-check: waiting up to 60 s for the GPUs of {G2} to be freed ({G2}: GPU 0 " \
           "busy (30000 MiB used" in done.stderr
    assert f"re-check: {G2} freed its GPUs after" in done.stderr
    result = run_result(tmp_path)
    check = result["attempts"][0]["recheck"]
    assert check["left_out"] == {} and 2.5 <= check["waited_s"][G2] < 60, check
    assert _attempt_hosts(tmp_path, 2) == [G1, G2]
    (incident,) = result["incidents"]
    assert incident["stages_s"]["re-checked"] < incident["stages_s"]["restarted"]
    assert f"{G2} freed its GPUs" in incident["recheck"]
    assert f"RAN 2 1 {G2}" in done.stdout


def test_a_host_that_keeps_its_gpu_memory_sits_out_the_restart(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    done = _launch(sim_cluster, tmp_path, release_s=300.0, timeout_s=2.0)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (f"re-check: {G2} left out for a cooldown: GPU 0 busy (30000 MiB used, 0% "
            "utilization)") in done.stderr
    result = run_result(tmp_path)
    assert list(result["attempts"][0]["recheck"]["left_out"]) == [G2]
    assert _attempt_hosts(tmp_path, 2) == [G1]
    assert result["np"] is None and f"RAN 2 0 {G1}" in done.stdout
