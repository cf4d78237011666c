"""From measured cells to fits, model ratios, crossovers and the targets (pure, numpy only).

Fits: one per transport, ``(a, B)`` by least squares with ``g`` fixed to the reduction cost
measured in the same run. Transports: every ring implementation (mpi4py = Open MPI's ring,
mpi4py-ring = the textbook ring in mpi4py, horovod, gloo) and each PS mode (ps-sync,
ps-pipe). Ring timings cannot separate ``g`` from ``B`` (costmodel.py); PS timings over several k
could, but a free ``g`` then soaks up whatever the model leaves out (for the pipelined PS: the
overlap it assumes and TCP does not deliver), so ``g`` stays measured and the pipelined PS's own
``B`` shows how much of the link its overlap really gets. Each cell then carries ``model_s`` and
``model_ratio = measured/model``. Every sweep cell counts; those from rounds that stayed
disturbed (harness.run_round) are flagged in the report, and each target says how many of its
cells were disturbed.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from ringtrain.bench.model import costmodel as model

MB4 = 4 * 1024 * 1024
TARGET_BYTES = 64 * 1024 * 1024
HOROVOD_TARGET = 0.75
MODEL_TARGET = 0.05


def _samples(cells: Iterable[dict[str, Any]]) -> list[model.Sample]:
    return [model.Sample(c["algo"], c["bytes"], c["n"], max(c["k"], 1), c["median_s"])
            for c in cells]


def _fit_group(cells: list[dict[str, Any]], g: float) -> model.Fit | str:
    """The fit, or why there is none (said in the report, never silently dropped)."""
    if len({c["bytes"] for c in cells}) < 2:
        return "one message size only: nothing to fit B against"
    try:
        return model.fit(_samples(cells), g=g)
    except ValueError as err:
        disturbed = sum(1 for c in cells if not c["accepted"])
        return str(err) + (f" ({disturbed} of {len(cells)} cells disturbed)" if disturbed else
                           " (noise: more --reps or a quieter machine)")


PS_KEYS = {"ps": "ps-sync", "ps_pipe": "ps-pipe"}


def fit_key(c: dict[str, Any]) -> str:
    """Transport of a cell: the ring implementation, or the PS mode."""
    return str(PS_KEYS.get(c["algo"], c["impl"]))


def fit_all(cells: Sequence[dict[str, Any]], g: float,
            errors: dict[str, str] | None = None) -> dict[str, model.Fit]:
    """One fit per transport over the sweep cells (a round still disturbed after all its
    attempts is kept, least disturbed attempt, and flagged in the report). Transports that
    cannot be fitted go to ``errors`` with the reason."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        if c["kind"] == "sweep" and c["algo"] != "p2p":
            groups[fit_key(c)].append(c)
    fits = {}
    for key, group in groups.items():
        fitted = _fit_group(group, g)
        if isinstance(fitted, str):
            if errors is not None:
                errors[key] = fitted
        else:
            fits[key] = fitted
    return fits


def annotate(cells: list[dict[str, Any]], fits: dict[str, model.Fit]) -> None:
    """Add ``model_s`` and ``model_ratio`` to every cell whose transport has a fit."""
    for c in cells:
        f = fits.get(fit_key(c))
        if f is None or c["algo"] == "p2p":
            c["model_s"] = c["model_ratio"] = None
            continue
        c["model_s"] = model.predict(f.params, c["algo"], c["bytes"], c["n"], max(c["k"], 1))
        c["model_ratio"] = c["median_s"] / c["model_s"]


def fit_summary(fits: dict[str, model.Fit]) -> dict[str, Any]:
    return {key: {**asdict(f.params), "fitted": list(f.fitted), "rms_rel": f.rms_rel,
                  "max_rel": f.max_rel, "samples": len(f.ratios)} for key, f in fits.items()}


def _median_of(cells: Iterable[dict[str, Any]]) -> float | None:
    times = [t for c in cells for t in c["times"]]
    return statistics.median(times) if times else None


def crossover(cells: Sequence[dict[str, Any]], fits: dict[str, model.Fit],
              ring_impl: str = "mpi4py") -> list[dict[str, Any]]:
    """Per N (>= 2) at the largest size measured with PS: the smallest k where the pipelined PS
    beats the ring, observed (medians) and predicted (fitted models; ideal N^2/(2(N-1)))."""
    sweep = [c for c in cells if c["kind"] == "sweep"]
    out = []
    ring_fit, ps_fit = fits.get(ring_impl), fits.get("ps-pipe")
    for n in sorted({c["n"] for c in sweep if c["algo"] == "ps_pipe"}):
        pipe = [c for c in sweep if c["algo"] == "ps_pipe" and c["n"] == n]
        size = max(c["bytes"] for c in pipe)
        ring = [c for c in sweep if c["algo"] == "ring" and c["impl"] == ring_impl
                and c["n"] == n and c["bytes"] == size]
        if not ring:
            continue
        t_ring = ring[0]["median_s"]
        ks = sorted({c["k"] for c in pipe})
        ratio = {k: next(c["median_s"] for c in pipe if c["k"] == k and c["bytes"] == size)
                 / t_ring for k in ks}
        observed = next((k for k in ks if ratio[k] < 1.0), None)
        predicted = (model.crossover_k(ring_fit.params, ps_fit.params, size, n)
                     if ring_fit and ps_fit else None)
        out.append({"n": n, "bytes": size, "ks": ks, "pipe_over_ring": ratio,
                    "observed_k": observed, "predicted_k": predicted,
                    "ideal_k_above": model.ideal_crossover_k(n)})
    return out


def horovod_target(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Horovod's busbw / mpi4py's at 64 MiB from the alternated target rounds (all iterations
    of accepted rounds pooled; an implementation's rejected rounds are used only when it has no
    accepted one)."""
    pool = [c for c in cells if c["kind"] == "target" and c["bytes"] == TARGET_BYTES]
    # per implementation: a rejected Horovod round must not hide behind an accepted mpi4py one
    use = []
    for impl in ("mpi4py", "horovod"):
        mine = [c for c in pool if c["impl"] == impl]
        use += [c for c in mine if c["accepted"]] or mine
    med = {impl: _median_of(c for c in use if c["impl"] == impl) for impl in ("mpi4py", "horovod")}
    best = {impl: min((t for c in use if c["impl"] == impl for t in c["times"]), default=None)
            for impl in ("mpi4py", "horovod")}
    if med["mpi4py"] is None or med["horovod"] is None:
        return {"measured": False, "reason": "no target rounds in this run"}
    n = use[0]["n"]
    bus = {impl: model.busbw(TARGET_BYTES, t, n) for impl, t in med.items() if t}
    ratio = bus["horovod"] / bus["mpi4py"]
    return {"measured": True, "n": n, "bytes": TARGET_BYTES, "busbw_Bps": bus,
            "best_s": best, "median_s": med, "ratio": ratio,
            "ratio_best": (best["mpi4py"] or math.nan) / (best["horovod"] or math.nan),
            "rounds": len(use), "all_accepted": all(c["accepted"] for c in use),
            "goal": HOROVOD_TARGET, "met": ratio >= HOROVOD_TARGET}


def model_target(cells: Sequence[dict[str, Any]], shaped: bool) -> dict[str, Any]:
    """Ring and push-then-pull PS within 5% of their fitted models for S >= 4 MiB."""
    if not shaped:
        return {"measured": False, "reason": "links not shaped (run on a simulated cluster "
                "with --link-rate); on local slots the model is fitted but not judged"}
    out: dict[str, Any] = {"measured": True, "goal": MODEL_TARGET}
    for algo, impl in (("ring", "mpi4py"), ("ring", "mpi4py-ring"), ("ps", "ps-grpc")):
        sel = [c for c in cells if c["kind"] == "sweep" and c["algo"] == algo
               and c["impl"] == impl and c["bytes"] >= MB4 and c.get("model_ratio")]
        if algo == "ring" and not sel:
            continue
        errs = [abs(c["model_ratio"] - 1.0) for c in sel]
        out[impl if algo == "ring" else algo] = {
                     "cells": len(sel), "disturbed": sum(not c["accepted"] for c in sel),
                     "max_abs_err": max(errs) if errs else None,
                     "median_abs_err": statistics.median(errs) if errs else None,
                     "met": bool(errs) and max(errs) <= MODEL_TARGET}
    rings = [out[k]["met"] for k in ("mpi4py", "mpi4py-ring") if k in out]
    out["met"] = bool(rings) and any(rings) and out["ps"]["met"]
    return out


def pipelined_target(cells: Sequence[dict[str, Any]], fits: dict[str, model.Fit],
                     ideal: model.Params | None = None, ring_impl: str = "mpi4py"
                     ) -> dict[str, Any]:
    """Where the model says the pipelined PS beats the ring (S >= 4 MiB), does it? Judged with
    the fitted models (each transport's own a and B) and, when the link is known, with the
    ideal model (both on the measured link bandwidth, no latency): the textbook prediction."""
    sweep = {(c["algo"], c["impl"], c["n"], c["k"], c["bytes"]): c for c in cells
             if c["kind"] == "sweep"}
    ring_fit, ps_fit = fits.get(ring_impl), fits.get("ps-pipe")
    if ring_fit is None or ps_fit is None:
        return {"measured": False, "reason": "ring or PS fit missing"}
    models = {"fitted": (ring_fit.params, ps_fit.params)}
    if ideal is not None:
        models["ideal"] = (ideal, ideal)
    out: dict[str, Any] = {"measured": True}
    for name, (ring_p, ps_p) in models.items():
        checks = []
        for (algo, _impl, n, k, size), c in sweep.items():
            ring = sweep.get(("ring", ring_impl, n, 0, size))
            if algo != "ps_pipe" or size < MB4 or ring is None:
                continue
            says = model.ps_time(ps_p, size, n, k, pipelined=True) < model.ring_time(
                ring_p, size, n)
            checks.append({"n": n, "k": k, "bytes": size, "model_says_ps_wins": says,
                           "ps_won": c["median_s"] < ring["median_s"],
                           "disturbed": not (c["accepted"] and ring["accepted"])})
        wins = [x for x in checks if x["model_says_ps_wins"]]
        out[name] = {"cells": checks, "predicted_wins": len(wins),
                     "observed_wins_of_predicted": sum(x["ps_won"] for x in wins),
                     "agreement": sum(x["model_says_ps_wins"] == x["ps_won"] for x in checks),
                     "disturbed": sum(x["disturbed"] for x in checks),
                     "met": all(x["ps_won"] for x in wins) if wins else None}
    out["met"] = out.get("ideal", out["fitted"])["met"]
    return out


def ideal_params(results: dict[str, Any]) -> model.Params | None:
    """Both transports on the measured link (raw MPI point-to-point over one shaped link,
    largest size), bandwidth terms only (no latency, no reduction cost): the textbook
    comparison behind k > N^2/(2(N-1)); at N = 2 it is a tie, never a predicted win."""
    if results["target"].get("link_Bps") is None:
        return None
    p2p = results["ceilings"].get("mpi_p2p") or []
    if not p2p:
        return None
    return model.Params(a=0.0, B=max(p2p, key=lambda p: p["bytes"])["Bps"], g=0.0)


def analyse(results: dict[str, Any]) -> dict[str, Any]:
    """Fit, annotate cells in place, and compute crossovers and targets."""
    cells = results["cells"]
    g = results["ceilings"]["reduce_g"]
    errors: dict[str, str] = {}
    fits = fit_all(cells, g, errors)
    annotate(cells, fits)
    shaped = results["target"].get("link_Bps") is not None
    return {"fits": fit_summary(fits), "fit_errors": errors,
            "crossover": crossover(cells, fits),
            "targets": {"horovod_vs_mpi4py": horovod_target(cells),
                        "model_within_5pct": model_target(cells, shaped),
                        "pipelined_ps_beats_ring": pipelined_target(cells, fits,
                                                                    ideal_params(results))}}
