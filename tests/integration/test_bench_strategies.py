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
        assert row["predicted_step_s"] > row["t1_s"]  # T1 plus a modelled exchange
    assert sum(r["winner_measured"] for r in rows) == 1
    assert sum(r["winner_predicted"] for r in rows) == 1
    report = (run_dir / "strategies.md").read_text()
    assert "| 2 | tf-ps k=1 |" in report and "Prediction check:" in report
    assert "Prediction check:" in proc.stdout
