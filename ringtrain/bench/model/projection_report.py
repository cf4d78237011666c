"""``ringtrain bench project``: the projection (projection.py) from a run's fit and a step time.

Inputs are files written by other bench commands: a compare/allreduce run (its fitted a and g;
B is the published link, not ours) and train runs (measured single-worker step times, N=1
rows). A model without a measured step time is projected only with ``--images-per-sec`` (the
user's number, labelled as such), never with an invented one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringtrain.bench.model import analysis, projection
from ringtrain.bench.model.costmodel import Params
from ringtrain.errors import UsageError


def load_fit(run_dir: Path, key: str) -> Params:
    res = json.loads((run_dir / "results.json").read_text())
    fits = analysis.fit_all(res["cells"], res["ceilings"]["reduce_g"])
    if key not in fits:
        raise UsageError(f"{run_dir} has no fit for {key!r} (has {', '.join(fits) or 'none'})",
                         "pass --fit with one of those, or a run that measured it")
    return fits[key].params


def measured_steps(train_dirs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """model -> the N=1 row of each train run (the single-worker step time)."""
    out = {}
    for d in train_dirs:
        data = json.loads((d / "train.json").read_text())
        for row in data["rows"]:
            if row["ranks"] == 1:
                out[row["model"]] = row
    return out


def _line(p: projection.Projection, source: str, latency: str) -> str:
    pub = "-" if p.published is None else f"{100 * p.published:.0f}%"
    need = "-" if p.needed_step_time_s is None else f"{p.needed_step_time_s:.3f} s"
    return (f"| {p.model} | {source} | {latency} | {p.step_time_s:.3f} | "
            f"{p.grad_bytes / 2**20:.0f} | "
            f"{p.comm_s:.3f} | {100 * p.efficiency_no_overlap:.1f}% | "
            f"{100 * p.efficiency_overlap:.1f}% | {pub} | {need} |")


def render(run_dir: Path, train_dirs: Sequence[Path], fit_key: str,
           images_per_sec: float | None, batch_size: int) -> str:
    fit = load_fit(run_dir, fit_key)
    setup = projection.HOROVOD_DOCS
    steps = measured_steps(train_dirs)
    sources: list[tuple[str, str, float]] = []
    for model in ("resnet101", "vgg16", "resnet50"):
        if model in steps:
            r = steps[model]
            sources.append((model, f"measured here: {r['device']}, batch {r['batch_size']}, "
                            f"{r['image_size']}px", r["batch_size"] / r["img_per_sec_per_worker"]))
        if images_per_sec:
            sources.append((model, f"user-given {images_per_sec:g} img/s, batch {batch_size}",
                            batch_size / images_per_sec))
    variants = ((fit, f"fitted a={fit.a * 1e6:.0f} us"),
                (Params(a=0.0, B=fit.B, g=fit.g), "a=0 (bandwidth only)"))
    rows = [_line(projection.project(p, setup, model, t1), src, label)
            for model, src, t1 in sources for p, label in variants]
    lines = [f"Projection for {setup.name} ({setup.workers} workers)",
             f"fit '{fit_key}' from {run_dir}: a={fit.a * 1e6:.1f} us, "
             f"g={fit.g * 1e12:.1f} ps/byte; B = published link x 0.9 goodput; tensor fusion "
             "64 MiB; overlap bound: 2/3 of a step hides communication", ""]
    if not rows:
        lines.append("No step time: run `ringtrain bench train --model resnet101` (and vgg16), "
                     "or pass --images-per-sec for the GPU you mean.")
        return "\n".join(lines)
    lines += ["| model | T_1 source | latency | T_1 s | grad MiB | T_comm s | eff (no overlap) | "
              "eff (overlap) | published | T_1 that matches published |",
              "|---|---|---|---|---|---|---|---|---|---|", *rows,
              "", "The fitted a is a per-step latency measured over emulated TCP links between "
              "Python processes; the ring takes 2(N-1) = 1022 such steps at N = 512, so a "
              "millisecond-scale a dominates. NCCL over RoCE has microsecond steps: the a=0 rows "
              "are the bandwidth-bound limit."]
    return "\n".join(lines)
