"""Write a benchmark run's outputs: results.json, cells.csv, report.md and PNG plots.

Everything is derived from ``results.json`` (``ringtrain bench report RUN`` regenerates the
rest from it). Bandwidths follow nccl-tests: algbw = S/t, busbw = algbw * 2(N-1)/N; both use
the median time of the cell.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringtrain.bench.allreduce.plots import write_plots

log = logging.getLogger(__name__)

CSV_FIELDS = ("kind", "algo", "impl", "n", "k", "bytes", "median_s", "best_s", "algbw_Bps",
              "busbw_Bps", "model_s", "model_ratio", "ps_over_ring", "reps", "round", "accepted")


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def gbs(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e9:.3f}"


def ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def add_ps_over_ring(cells: list[dict[str, Any]], ring_impl: str = "mpi4py") -> None:
    ring = {(c["n"], c["bytes"]): c["median_s"] for c in cells
            if c["algo"] == "ring" and c["impl"] == ring_impl and c["kind"] == "sweep"}
    for c in cells:
        t = ring.get((c["n"], c["bytes"]))
        c["ps_over_ring"] = c["median_s"] / t if c["algo"].startswith("ps") and t else None


def write_csv(path: Path, cells: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for c in cells:
            w.writerow({**c, "reps": len(c["times"])})


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return [*lines, ""]


def _ceilings(res: dict[str, Any]) -> list[str]:
    c = res["ceilings"]
    rows = [["memcpy (numpy, 64 MiB)", gbs(c["memcpy_Bps"]), "GB/s"],
            ["float32 sum (numpy, in place) = 1/g", gbs(1.0 / c["reduce_g"]), "GB/s"],
            ["TCP loopback (one connection)", gbs(c["tcp_loopback_Bps"]), "GB/s"]]
    rows += [[f"raw MPI point-to-point {human_bytes(p['bytes'])} ({p['where']})",
              gbs(p["Bps"]), "GB/s"] for p in c.get("mpi_p2p", [])]
    if res["target"].get("link_Bps"):
        rows.append(["configured link rate (tc tbf)", gbs(res["target"]["link_Bps"]), "GB/s"])
    return ["## Ceilings (measured in this run)", "", *_table(["ceiling", "value", ""], rows)]


def _disturbed(count: int) -> str:
    return f"; {count} of these cells from disturbed rounds" if count else ""


def _targets(res: dict[str, Any]) -> list[str]:
    t = res["analysis"]["targets"]
    lines = ["## Targets", ""]
    h = t["horovod_vs_mpi4py"]
    if h["measured"]:
        lines.append(
            f"- Horovod busbw / mpi4py busbw at 64 MiB, N={h['n']}, same ranks: "
            f"**{h['ratio']:.2f}** (goal >= {h['goal']:.2f}: "
            f"{'met' if h['met'] else 'NOT met'}); Horovod {gbs(h['busbw_Bps']['horovod'])} "
            f"GB/s, mpi4py {gbs(h['busbw_Bps']['mpi4py'])} GB/s (medians over "
            f"{h['rounds']} alternated rounds; ratio of best times {h['ratio_best']:.2f}"
            f"{'' if h['all_accepted'] else '; some rounds disturbed'})")
    else:
        lines.append(f"- Horovod vs mpi4py: not measured ({h['reason']})")
    m = t["model_within_5pct"]
    if m["measured"]:
        names = {"mpi4py": "ring (Open MPI's, mpi4py)", "mpi4py-ring": "ring (textbook, mpi4py)",
                 "ps": "push-then-pull PS"}
        for key in ("mpi4py", "mpi4py-ring", "ps"):
            if key not in m:
                continue
            a = m[key]
            err = "-" if a["max_abs_err"] is None else f"{100 * a['max_abs_err']:.1f}%"
            lines.append(f"- {names[key]} within 5% of its fitted model for S >= 4 MiB: max "
                         f"error {err} "
                         f"over {a['cells']} cells ({'met' if a['met'] else 'NOT met'}"
                         f"{_disturbed(a['disturbed'])})")
    else:
        lines.append(f"- model within 5%: not judged ({m['reason']})")
    p = t["pipelined_ps_beats_ring"]
    if not p["measured"]:
        lines.append(f"- pipelined PS vs ring: not judged ({p['reason']})")
    for name, what in (("ideal", "the ideal model (measured link bandwidth, bandwidth terms "
                                 "only) says"), ("fitted", "the fitted models say")):
        q = p.get(name)
        if q is None:
            continue
        if q["met"] is None:
            lines.append(f"- pipelined PS beats the ring where {what} so: no PS win predicted "
                         f"among the {len(q['cells'])} cells of >= 4 MiB (not "
                         f"applicable; prediction and measurement agree on {q['agreement']})")
            continue
        lines.append(f"- pipelined PS beats the ring where {what} so: "
                     f"{q['observed_wins_of_predicted']}/{q['predicted_wins']} predicted wins "
                     f"observed; prediction and measurement agree on {q['agreement']}/"
                     f"{len(q['cells'])} cells ({'met' if q['met'] else 'NOT met'}"
                     f"{_disturbed(q['disturbed'])})")
    return [*lines, ""]


def _fits(res: dict[str, Any]) -> list[str]:
    rows = [[k, f"{f['a'] * 1e6:.1f}", gbs(f["B"]), gbs(1.0 / f["g"]) if f["g"] > 0 else "inf",
             ",".join(f["fitted"]), f"{100 * f['rms_rel']:.1f}%", f"{100 * f['max_rel']:.1f}%",
             str(f["samples"])] for k, f in res["analysis"]["fits"].items()]
    head = ["transport", "a (us)", "B (GB/s)", "1/g (GB/s)", "fitted", "rms err", "max err",
            "cells"]
    cross = [[str(c["n"]), human_bytes(c["bytes"]), f"{c['ideal_k_above']:.2f}",
              str(c["predicted_k"]), str(c["observed_k"]),
              ", ".join(f"k={k}: {v:.2f}" for k, v in c["pipe_over_ring"].items())]
             for c in res["analysis"]["crossover"]]
    unfitted = [f"- no fit for {k}: {why}" for k, why in
                res["analysis"].get("fit_errors", {}).items()]
    return ["## Cost model fits (least squares on relative error)", "",
            *_table(head, rows), *unfitted, *([""] if unfitted else []),
            "## Ring / pipelined-PS crossover (smallest k where PS wins)", "",
            *_table(["N", "size", "ideal: k >", "predicted k", "observed k",
                     "pipelined PS / ring"], cross)]


def _cells_table(cells: Sequence[dict[str, Any]], title: str) -> list[str]:
    rows = [[c["algo"], c["impl"], str(c["n"]), str(c["k"] or "-"), human_bytes(c["bytes"]),
             ms(c["median_s"]), ms(c["best_s"]), gbs(c["algbw_Bps"]), gbs(c["busbw_Bps"]),
             ratio(c.get("model_ratio")), ratio(c.get("ps_over_ring")),
             "" if c["accepted"] else "disturbed"] for c in cells]
    head = ["algo", "impl", "N", "k", "size", "median ms", "best ms", "algbw GB/s",
            "busbw GB/s", "measured/model", "PS/ring", ""]
    return [f"## {title}", "", *_table(head, rows)]


def _warmups(cells: Sequence[dict[str, Any]]) -> list[str]:
    """What each cell's warm-up cost before its timed iterations (bench/allreduce/settle.py)."""
    rows = [[c["impl"], str(c["n"]), human_bytes(c["bytes"]), str(w["iterations"]),
             ms(w["first_s"]), ms(w["last_s"]), ms(c["median_s"]), f"{w['seconds']:.3f}"]
            for c in cells if (w := c.get("warmup"))]
    if not rows:
        return []
    return ["## Warm-up (until the times settle, before the timed iterations)", "",
            *_table(["impl", "N", "size", "iterations", "first ms", "settled ms",
                     "timed median ms", "warm-up s"], rows)]


def _rounds(res: dict[str, Any]) -> list[str]:
    rows = [[r["label"], str(r["attempts"]), "yes" if r["accepted"] else "no",
             f"{100 * r['drift']:.0f}%", f"{100 * r.get('foreign_cpu', 0.0):.0f}%",
             f"{r['before']['load']['loadavg1']:.1f}",
             f"{r['after']['load']['loadavg1']:.1f}", f"{r['seconds']:.1f}"]
            for r in res["rounds"]]
    return ["## Rounds", "",
            "A round is rejected and run again when its ceilings drift more than the tolerance "
            "or other processes use more than the allowed share of the machine meanwhile; one "
            "still disturbed after its last attempt is kept (least disturbed attempt) and its "
            "cells are flagged 'disturbed'.", "",
            *_table(["round", "attempts", "accepted", "drift", "foreign CPU", "load before",
                     "load after", "seconds"], rows)]


def render_markdown(res: dict[str, Any]) -> str:
    t = res["target"]
    lines = [f"# ringtrain bench {res['id']}", "",
             f"- when: {res['created']}; command: `{res['command']}`",
             f"- where: {t['name']} ({t['cores']} cores"
             + (f", hosts {', '.join(t['hosts'])}" if t["hosts"] else "")
             + (f", links shaped to {t['link_Bps'] * 8 / 1e6:g} Mbit/s" if t["link_Bps"] else "")
             + ")",
             f"- versions: {', '.join(f'{k} {v}' for k, v in res['versions'].items())}",
             f"- RDMA: {res['rdma']['summary']}",
             f"- GPU: {res.get('gpu', 'none used')}", ""]
    lines += _targets(res) + _ceilings(res)
    if res["analysis"]["fits"]:
        lines += _fits(res)
    elif res["analysis"].get("fit_errors"):
        lines += ["## Cost model fits", "", *(f"- no fit for {k}: {why}" for k, why in
                                              res["analysis"]["fit_errors"].items()), ""]
    cells = [c for c in res["cells"] if c["kind"] != "ceiling"]
    for kind, title in (("sweep", "Sweep cells"), ("target", "Target rounds (64 MiB)")):
        sel = [c for c in cells if c["kind"] == kind]
        if sel:
            lines += _cells_table(sel, title)
    lines += _warmups(cells)
    lines += _rounds(res)
    lines += ["Plots: " + ", ".join(f"[{p}]({p})" for p in res.get("plots", [])), ""]
    return "\n".join(lines)


def write_all(run_dir: Path, res: dict[str, Any]) -> list[Path]:
    """Write every output file of ``res`` into ``run_dir``; returns their paths."""
    run_dir.mkdir(parents=True, exist_ok=True)
    add_ps_over_ring(res["cells"])
    plots = write_plots(run_dir, res)
    res["plots"] = [p.name for p in plots]
    files = [run_dir / "results.json", run_dir / "cells.csv", run_dir / "report.md", *plots]
    files[0].write_text(json.dumps(res, indent=1, default=float) + "\n")
    write_csv(files[1], res["cells"])
    files[2].write_text(render_markdown(res))
    log.info("wrote %s", ", ".join(str(f) for f in files))
    return files
