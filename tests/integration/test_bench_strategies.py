"""``ringtrain bench train --strategy``: Horovod's ring, TF MultiWorkerMirrored and TF
parameter servers on the same local slots, each cell through ``ringtrain launch --strategy``;
the table, the JSON and the cost model's prediction per cell (the numbers themselves are a
benchmark's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.bench.model import costmodel
from ringtrain.bench.train import strategies, tfps_model
from ringtrain.hostfile import parse_host_spec
from ringtrain.launch.reporter import NullReporter
from ringtrain.remote.ssh import SshRemote
from ringtrain.sim import shaping
from ringtrain.spec import SshSpec
from tests.integration.simnames import G1, G2, G3

pytestmark = [pytest.mark.slow, pytest.mark.mpi]


def test_three_strategies_measured_and_predicted(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ringtrain", "bench", "train", "--strategy",
         "horovod,tf-multiworker,tf-ps", "--ps", "1", "--model", "dense", "-n", "2",
         "--steps", "3", "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (run_dir,) = tmp_path.glob("bench-strategies-*")
    data = json.loads((run_dir / "strategies.json").read_text())
    rows = data["rows"]
    assert [(r["strategy"], r["k"]) for r in rows] == [
        ("horovod", 0), ("tf-multiworker", 0), ("tf-ps", 1)]
    for row in rows:
        assert "error" not in row, row
        assert row["workers"] == 2 and row["param_bytes"] == 16_834_600
        assert row["samples_per_s"] > 0 and row["t1_s"] > 0
        assert 0 < row["exchange_s"] < 10 * row["step_s"]  # the exchange alone, measured
        assert row["predicted_step_s"] > row["t1_s"]  # T1 plus a modelled exchange
    assert sum(r["winner_measured"] for r in rows) == 1
    assert sum(r["winner_predicted"] for r in rows) >= 1  # the two all-reduces may tie
    report = (run_dir / "strategies.md").read_text()
    assert "| 2 | tf-ps k=1 |" in report and "- N=2: measured winner" in report
    assert "Prediction check:" in proc.stdout


@pytest.mark.ssh
def test_on_shaped_simulated_links_every_strategy_pays_the_link(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    """Two workers on gpu01 and gpu02, the ps task alone on gpu03 (--ps-hosts own), every link
    shaped: the model's B is the link, and no strategy exchanges 16.8 MB faster than it. The
    one-worker TF PS cell measures gRPC's share of the link, and TF's PS model uses it."""
    rate, link = "400mbit", 400e6 / 8
    cfg = strategies.StrategyBench(
        model="dense", ns=(1, 2), strategies=("horovod", "tf-ps"), ks=(1,), ps_hosts="own",
        steps=2, warmup=1, runs_dir=tmp_path, working_dir=tmp_path,
        ssh=SshSpec(sim_cluster.ssh_config, sim_cluster.known_hosts))
    hosts = parse_host_spec(f"{G1}:1,{G2}:1,{G3}:1")
    params = costmodel.Params(a=0.0, B=link, g=1e-10)
    shaping.set_all_link_rates(sim_cluster.config, rate)
    try:
        run_dir = strategies.run_and_write(hosts, SshRemote(sim_cluster.ssh_config,
                                                            sim_cluster.known_hosts),
                                           cfg, params, "the shaped link", NullReporter())
    finally:
        shaping.set_all_link_rates(sim_cluster.config, None)
    rows = json.loads((run_dir / "strategies.json").read_text())["rows"]
    assert [(r["workers"], r["strategy"], r["k"]) for r in rows] == [
        (1, "tf-ps", 1), (1, "tf-ps", 2), (2, "horovod", 0), (2, "tf-ps", 1)]
    for row in rows:
        assert "error" not in row, row
        assert row["step_s"] > 0.9 * row["param_bytes"] / link, row  # S/B: the ring's floor
    # one worker pulls then pushes S through its one link: 2 S/B at best
    shares = tfps_model.efficiencies(rows, link)
    assert 0.3 < shares.get(1, 0) < 1.05 and 2 in shares, (shares, rows[:2])
    assert "tfps_step_s" in rows[3] and rows[3]["tfps_bound"], rows[3]
    report = (run_dir / "strategies.md").read_text()
    assert "- N=2: measured winner" in report and "- N=1:" not in report
    assert "TF's parameter servers, modelled as measured" in report
