"""Training throughput scaling: images/s per worker for N = 1.. and efficiency X(N)/(N X(1)).

X(N) is the total rate of N workers (N times the per-worker rate), so the efficiency equals
``per_worker(N) / per_worker(1)``. Each N is one round (``harness.run_round``) of
``train_throughput`` ranks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ringtrain.bench.allreduce.harness import Job, Round, Target, run_round

log = logging.getLogger(__name__)
PROGRAM = "ringtrain.bench.train.train_throughput"


@dataclass(frozen=True, slots=True)
class TrainConfig:
    model: str = "resnet50"
    ns: tuple[int, ...] = (1, 2)
    batch_size: int = 32
    image_size: int = 224
    warmup: int = 2
    batches: int = 2
    iters: int = 3
    env: tuple[tuple[str, str], ...] = ()
    quiet_wait: float = 0.0
    timeout: float = 1800.0


def train_job(cfg: TrainConfig, target: Target, n: int) -> Job:
    argv = ("--model", cfg.model, "--batch-size", str(cfg.batch_size), "--image-size",
            str(cfg.image_size), "--warmup", str(cfg.warmup), "--batches", str(cfg.batches),
            "--iters", str(cfg.iters))
    hosts = tuple(range(n)) if target.remote else ()
    return Job(PROGRAM, argv, n, env=cfg.env, hosts=hosts, timeout=cfg.timeout, mpi_ring=False)


def efficiency(rows: Sequence[dict[str, Any]]) -> None:
    """Add ``total_img_per_sec`` and ``scaling_efficiency`` (vs the N=1 row) in place."""
    one = next((r["img_per_sec_per_worker"] for r in rows if r["ranks"] == 1), None)
    for r in rows:
        r["total_img_per_sec"] = r["img_per_sec_per_worker"] * r["ranks"]
        r["scaling_efficiency"] = r["img_per_sec_per_worker"] / one if one else None


def run_scaling(cfg: TrainConfig, target: Target,
                on_round: Callable[[Round], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for n in cfg.ns:
        rnd = run_round(target, train_job(cfg, target, n), f"train {cfg.model} N={n}",
                        quiet_wait=cfg.quiet_wait, attempts=2, tolerance=0.5)
        if on_round is not None:
            on_round(rnd)
        row = dict(rnd.rows[0])
        row.update(accepted=rnd.accepted, foreign_cpu=rnd.foreign, cores=target.cores)
        rows.append(row)
    efficiency(rows)
    return rows


def render(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Training throughput ({meta['id']}): synthetic {meta['model']}", "",
             f"Device: {meta['device']}. {meta['cores']} cores shared by all local ranks "
             "(N ranks split them: on a CPU-only host the efficiency measures CPU sharing, "
             "not the network).", "",
             "| N | img/s per worker | total img/s | step s | efficiency X(N)/(N X(1)) | "
             "device | undisturbed |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        eff = "-" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency']:.2f}"
        lines.append(f"| {r['ranks']} | {r['img_per_sec_per_worker']:.2f} | "
                     f"{r['total_img_per_sec']:.2f} | {r['step_time_s']:.3f} | {eff} | "
                     f"{r['device']} | {'yes' if r['accepted'] else 'no'} |")
    return "\n".join(lines) + "\n"


def run_and_write(cfg: TrainConfig, target: Target, runs_dir: Path,
                  on_round: Callable[[Round], None] | None = None) -> Path:
    from ringtrain.bench.allreduce import benchrun as session

    run_id, run_dir = session.new_run_dir(runs_dir, "bench-train")
    rows = run_scaling(cfg, target, on_round)
    meta = {"id": run_id, "model": cfg.model, "config": asdict(cfg), "cores": target.cores,
            "device": rows[0]["device"] if rows else "?", "gpu": session.gpu_line(),
            "versions": session.versions()}
    (run_dir / "train.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1)
                                        + "\n")
    (run_dir / "train.md").write_text(render(rows, meta))
    return run_dir
