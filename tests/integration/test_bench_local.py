"""A small real `ringtrain bench compare` on local slots: every output file, sane values.

2 ranks, 3 sizes, 2 timed iterations; rings: Open MPI's and the textbook one (mpi4py), Horovod
over MPI and over Gloo; a gRPC parameter server with k = 1 and 2; one alternated Horovod/mpi4py
pair at 64 MiB.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrain.bench.model import analysis

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    runs = tmp_path_factory.mktemp("bench")
    argv = [sys.executable, "-m", "ringtrain", "bench", "compare", "-n", "2", "-k", "1,2",
            "--sizes", "4K,256K,4M", "--reps", "2", "--warmup", "1", "--target-pairs", "1",
            "--quiet-wait", "0", "--attempts", "1", "--runs-dir", str(runs),
            "--impl", "mpi4py,mpi4py-ring,horovod,gloo"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RDMA: " in done.stdout and "report:" in done.stdout
    (path,) = runs.iterdir()
    return path


def test_every_output_file_is_written(run_dir: Path) -> None:
    names = {p.name for p in run_dir.iterdir()}
    assert names >= {"results.json", "cells.csv", "report.md", "bandwidth_vs_size.png",
                     "time_vs_n.png", "ps_ring_vs_k.png"}
    for png in run_dir.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    md = (run_dir / "report.md").read_text()
    for heading in ("## Targets", "## Ceilings", "## Cost model fits", "## Sweep cells",
                    "## Rounds"):
        assert heading in md
    assert "RDMA: " in md


def test_values_are_sane(run_dir: Path) -> None:
    res = json.loads((run_dir / "results.json").read_text())
    cells = [c for c in res["cells"] if c["kind"] == "sweep"]
    kinds = {(c["algo"], c["impl"]) for c in cells}
    assert kinds == {("ring", "mpi4py"), ("ring", "mpi4py-ring"), ("ring", "horovod"),
                     ("ring", "gloo"), ("ps", "ps-grpc"), ("ps_pipe", "ps-grpc")}
    assert len(cells) == 3 * 4 + 3 * 2 * 2
    memcpy = {int(k): v for k, v in res["ceilings"]["memcpy_by_size"].items()}
    cores = res["target"]["cores"]
    for c in cells:
        assert len(c["times"]) == 2 and all(t > 0 for t in c["times"])
        assert c["busbw_Bps"] > 0 and 0 < c["algbw_Bps"] <= c["busbw_Bps"]
        # N ranks copy at most min(N, cores) buffers at once, each no faster than memcpy; x2
        # headroom because memcpy is sampled once and may land on a busy moment (a units slip,
        # bits for bytes or a missing 2(N-1)/N, is off by far more)
        assert c["busbw_Bps"] < 2 * memcpy[c["bytes"]] * min(c["n"], cores), c
    fits, unfitted = res["analysis"]["fits"], res["analysis"]["fit_errors"]
    # every transport is fitted, or the report says why not (2 reps on a shared machine: a
    # disturbed transport may not grow with size; CI saw Horovod at 49, 50, 31 ms for 4K..4M)
    assert set(fits) | set(unfitted) == {"mpi4py", "mpi4py-ring", "horovod", "gloo", "ps-sync",
                                         "ps-pipe"}
    assert fits, unfitted
    md = (run_dir / "report.md").read_text()
    assert all(f"no fit for {k}: " in md for k in unfitted)
    for f in fits.values():
        assert f["B"] > 0 and f["a"] >= 0 and math.isfinite(f["rms_rel"])
    for c in cells:
        fitted = analysis.fit_key(c) in fits
        assert (c["model_ratio"] is not None and math.isfinite(c["model_ratio"])) == fitted, c
    target = res["analysis"]["targets"]["horovod_vs_mpi4py"]
    assert target["measured"] and target["ratio"] > 0 and math.isfinite(target["ratio"])
    assert res["ceilings"]["mpi_p2p"] and res["ceilings"]["tcp_loopback_Bps"] > 0


def test_csv_and_rerender_agree(run_dir: Path) -> None:
    rows = list(csv.DictReader((run_dir / "cells.csv").open()))
    res = json.loads((run_dir / "results.json").read_text())
    assert len(rows) == len(res["cells"])
    ps_rows = [r for r in rows if r["algo"].startswith("ps")]
    assert ps_rows and all(float(r["ps_over_ring"]) > 0 for r in ps_rows)
    before = (run_dir / "report.md").read_text()
    done = subprocess.run([sys.executable, "-m", "ringtrain", "bench", "report", str(run_dir)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "report.md").read_text() == before


def test_project_from_the_runs_fit(run_dir: Path) -> None:
    # Horovod's fit is the default; with 2 reps on a shared machine it may be missing (the
    # run's report says why, test_values_are_sane accepts it), and then project refuses
    # with a clear error naming the fits there are: take one of those instead
    fits = json.loads((run_dir / "results.json").read_text())["analysis"]["fits"]
    fit = "horovod" if "horovod" in fits else sorted(fits)[0]
    done = subprocess.run([sys.executable, "-m", "ringtrain", "bench", "project", "--run",
                           str(run_dir), "--images-per-sec", "200", "--fit", fit],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = [ln for ln in done.stdout.splitlines() if ln.startswith("| resnet101 |")]
    assert len(rows) == 2 and all("user-given 200 img/s" in r for r in rows), done.stdout
    effs = [float(cell.strip().rstrip("%")) for r in rows for cell in r.split("|")[7:9]]
    assert all(0 < e <= 100 for e in effs), rows


def test_train_scaling_on_local_slots(tmp_path: Path) -> None:
    """`bench train` with the small digits CNN: one round per N, efficiency against N=1."""
    argv = [sys.executable, "-m", "ringtrain", "bench", "train", "--model", "digits", "-n", "1,2",
            "--batch-size", "64", "--batches", "2", "--iters", "2", "--quiet-wait", "0",
            "--runs-dir", str(tmp_path)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (train_dir,) = tmp_path.iterdir()
    rows = json.loads((train_dir / "train.json").read_text())["rows"]
    assert [r["ranks"] for r in rows] == [1, 2]
    one, two = rows  # efficiency X(2)/(2 X(1)) is the per-worker rate against N=1's
    expected = two["img_per_sec_per_worker"] / one["img_per_sec_per_worker"]
    assert two["scaling_efficiency"] == pytest.approx(expected) and 0 < expected < 1.5
    for r in rows:
        assert r["img_per_sec_per_worker"] > 0 and r["device"] == "CPU"
        assert r["total_img_per_sec"] == pytest.approx(r["img_per_sec_per_worker"] * r["ranks"])
    assert "| 2 |" in (train_dir / "train.md").read_text()
