"""ringtrain bench on the simulated cluster with shaped links (tc tbf on both veth ends).

One rank per simulated host: 2 ring ranks, PS with k = 1 and 2 shards on hosts of their own.
Checks that the shaping is what the ranks actually see (the raw MPI point-to-point ceiling is
the link rate; no all-reduce beats the bandwidth bound), that the model is fitted and judged,
and that the shaping is gone afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.bench.allreduce import benchrun as session
from ringtrain.bench.allreduce import suite
from ringtrain.sim import shaping
from tests.integration.simnames import G3

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]
RATE = "200mbit"
LINK = 200e6 / 8  # bytes/s
MIB = 1 << 20


@pytest.fixture(scope="module")
def shaped(sim_cluster: sim.SimCluster, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, object]:
    cfg = suite.BenchConfig(sizes=(MIB, 4 * MIB), ns=(2,), ks=(1, 2),
                            impls=("mpi4py", "mpi4py-ring"),
                            reps=3, warmup=1, attempts=2, quiet_wait=10, timeout=240)
    shaping.set_all_link_rates(sim_cluster.config, RATE)
    try:
        assert shaping.link_rate(sim_cluster.config, G3) == 200_000_000
        target = session.cluster_target(sim_cluster, shaping.parse_rate(RATE))
        run_dir, res = session.run(cfg, target, ("p2p", "ring", "ps"),
                                   tmp_path_factory.mktemp("bench"), "pytest sim")
    finally:
        shaping.set_all_link_rates(sim_cluster.config, None)
    return {"dir": run_dir, "res": res}


def test_shaping_is_removed_afterwards(shaped: dict[str, object],
                                       sim_cluster: sim.SimCluster) -> None:
    assert all(shaping.link_rate(sim_cluster.config, h) is None for h in sim_cluster.names)


def test_ranks_see_the_shaped_link(shaped: dict[str, object]) -> None:
    res = shaped["res"]
    assert isinstance(res, dict)
    p2p = res["ceilings"]["mpi_p2p"]
    assert p2p and p2p[-1]["where"] == "one simulated link"
    # TCP over a tbf-shaped veth: payload goodput a few percent under the configured rate
    # (typical 0.93-0.97); the floor only catches an unshaped or broken link on a loaded machine
    assert 0.25 * LINK < p2p[-1]["Bps"] < 1.02 * LINK
    for c in res["cells"]:
        if c["algo"] == "ring" and c["bytes"] == 4 * MIB:  # both rings
            bound = 2 * (c["n"] - 1) / c["n"] * c["bytes"] / LINK
            assert c["best_s"] > 0.97 * bound  # nothing beats the link


def test_model_is_fitted_and_judged(shaped: dict[str, object]) -> None:
    res = shaped["res"]
    assert isinstance(res, dict)
    fits = res["analysis"]["fits"]
    assert {"mpi4py", "mpi4py-ring", "ps-sync", "ps-pipe"} <= set(fits)
    # The measured cells never beat the link (the test above, 2% slack). This is the fitted
    # slope, not a measurement: the shaper lets each transfer's first 128 KiB (its burst) pass
    # at line speed, which a + S/B over a few sizes absorbs partly into B; CI saw 1.097x.
    # The lower bound is loose: the machine is shared, and at N=2 a 4 MiB ring step sometimes
    # runs at 1/1.5 of the link (docs/BENCH.md)
    for key in ("mpi4py", "mpi4py-ring"):
        assert 0.25 * LINK < fits[key]["B"] < 1.15 * LINK, fits[key]
    judged = res["analysis"]["targets"]["model_within_5pct"]
    assert judged["measured"] and judged["ps"]["cells"] == 2
    assert judged["mpi4py"]["cells"] == judged["mpi4py-ring"]["cells"] == 1
    run_dir = shaped["dir"]
    assert isinstance(run_dir, Path)
    md = (run_dir / "report.md").read_text()
    assert "links shaped to 200 Mbit/s" in md
    assert json.loads((run_dir / "results.json").read_text())["target"]["link_Bps"] == LINK
