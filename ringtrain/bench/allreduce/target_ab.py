"""Issue 28, item 4: Horovod/mpi4py at 64 MiB, one variant against another, interleaved.

``python -m ringtrain.bench.allreduce.target_ab default,bind-core 10`` runs, ``RUNS`` times,
one "run" per variant in turn (A B A B ..., so the machine's drift falls on both): a run is
``bench compare``'s target, three alternated mpi4py and Horovod rounds at 64 MiB on two local
ranks (the compare's own jobs and settings), and its ratio is the median mpi4py time over the
median Horovod time (>= 0.95: the issue's goal). Variants: ``default`` (the compare's mpirun,
``-bind-to none``) and ``bind-core`` (each rank bound to a core). One JSON line per run, then
per variant the ratios and how many reached 0.95.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ringtrain.bench.allreduce import harness, suite
from ringtrain.bench.model.analysis import TARGET_BYTES

VARIANTS = ("default", "bind-core")
GOAL = 0.95


def summary(variant: str, ratios: Sequence[float]) -> dict[str, Any]:
    """A variant's ratios and how many reached the goal. Pure."""
    return {"variant": variant, "ratios": [round(r, 3) for r in ratios],
            "met": sum(r >= GOAL for r in ratios), "of": len(ratios)}


def one_run(variant: str, cfg: suite.BenchConfig, target: harness.Target) -> dict[str, Any]:
    bind = "core" if variant == "bind-core" else "none"
    times: dict[str, list[float]] = {"mpi4py": [], "horovod": []}
    for _ in range(3):
        for impl, got in times.items():
            job = replace(suite.ring_job(cfg, target, impl, 2, [TARGET_BYTES]), bind=bind)
            rnd = harness.run_round(target, job, f"{variant} {impl}", quiet_wait=20.0)
            for row in rnd.rows:
                got.extend(row["times"])
    mpi, hvd = statistics.median(times["mpi4py"]), statistics.median(times["horovod"])
    return {"variant": variant, "ratio": round(mpi / hvd, 3), "mpi4py_ms": round(1e3 * mpi, 2),
            "horovod_ms": round(1e3 * hvd, 2), "at": time.strftime("%H:%M:%S")}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    variants = (args[0] if args else "default,bind-core").split(",")
    runs = int(args[1]) if len(args) > 1 else 10
    if not set(variants) <= set(VARIANTS):
        sys.stderr.write(f"variants: {', '.join(VARIANTS)}\n")
        return 2
    cfg, target = suite.BenchConfig(sizes=(TARGET_BYTES,)), harness.local_target()
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(runs):
        for v in variants:
            row = one_run(v, cfg, target)
            ratios[v].append(row["ratio"])
            print(json.dumps(row), flush=True)
    for v in variants:
        print(json.dumps(summary(v, ratios[v])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
