"""PNG plots of a benchmark run (matplotlib, Agg backend: no display needed).

* ``bandwidth_vs_size.png``: busbw vs size, one panel per N, every implementation, with the
  memcpy and raw-MPI ceilings;
* ``time_vs_n.png``: time vs N at the largest size (ring and PS), measured and modelled;
* ``ps_ring_vs_k.png``: PS/ring time ratio vs k at the largest size, measured and modelled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringtrain.bench.figures import dress, pyplot, save_figure
from ringtrain.bench.model import costmodel as model

log = logging.getLogger(__name__)


def _series(cells: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for c in cells:
        if c["kind"] == "sweep" and c["algo"] != "p2p":
            name = c["impl"] if c["algo"] == "ring" else f"{c['algo']} k={c['k']}"
            out.setdefault((name, c["algo"], c["n"]), []).append(c)
    return out


def _label(key: tuple[str, str, int]) -> str:
    name, algo, _ = key
    return f"ring {name}" if algo == "ring" else name.replace("ps_pipe", "PS pipelined").replace(
        "ps ", "PS push-then-pull ")


def bandwidth_vs_size(path: Path, res: dict[str, Any]) -> Path | None:
    series = _series(res["cells"])
    ns = sorted({n for _, _, n in series})
    if not ns:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(ns), figsize=(6 * len(ns), 4.5), squeeze=False)
    ceil = res["ceilings"]
    for ax, n in zip(axes[0], ns, strict=True):
        for key, group in sorted(series.items()):
            if key[2] != n:
                continue
            cells = sorted(group, key=lambda c: c["bytes"])
            ax.plot([c["bytes"] for c in cells], [c["busbw_Bps"] / 1e9 for c in cells],
                    marker="o", ms=3, label=_label(key),
                    ls="-" if key[1] == "ring" else "--")
        ax.axhline(ceil["memcpy_Bps"] / 1e9, color="grey", lw=0.8, ls=":", label="memcpy")
        for p in ceil.get("mpi_p2p", [])[-1:]:
            ax.axhline(p["Bps"] / 1e9, color="black", lw=0.8, ls="-.", label="raw MPI p2p")
        ax.set(xscale="log", yscale="log", xlabel="bytes per worker",
               ylabel="busbw (GB/s)", title=f"N = {n}")
        dress(ax)
    return save_figure(plt, fig, path)


def _largest(cells: Sequence[dict[str, Any]]) -> int | None:
    sizes = {c["bytes"] for c in cells if c["kind"] == "sweep" and c["algo"] != "p2p"}
    return max(sizes) if sizes else None


def time_vs_n(path: Path, res: dict[str, Any]) -> Path | None:
    size = _largest(res["cells"])
    if size is None:
        return None
    series = _series([c for c in res["cells"] if c["bytes"] == size])
    by_name: dict[str, list[dict[str, Any]]] = {}
    for (name, algo, _), cells in series.items():
        by_name.setdefault(_label((name, algo, 0)), []).extend(cells)
    if not by_name:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, group in sorted(by_name.items()):
        cells = sorted(group, key=lambda c: c["n"])
        line = ax.plot([c["n"] for c in cells], [c["median_s"] for c in cells], marker="o",
                       label=name)[0]
        if all(c.get("model_s") for c in cells):
            ax.plot([c["n"] for c in cells], [c["model_s"] for c in cells], ls=":",
                    color=line.get_color())
    ax.set(xlabel="workers N", ylabel="time (s), dotted: model", yscale="log",
           title=f"time vs N at {size / 2**20:g} MiB")
    dress(ax)
    return save_figure(plt, fig, path)


def ps_ring_vs_k(path: Path, res: dict[str, Any]) -> Path | None:
    size = _largest(res["cells"])
    if size is None:
        return None
    cells = [c for c in res["cells"] if c["kind"] == "sweep" and c["bytes"] == size
             and c["algo"] in ("ps", "ps_pipe") and c.get("ps_over_ring")]
    if not cells:
        return None
    fits = res["analysis"]["fits"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (algo, n) in sorted({(c["algo"], c["n"]) for c in cells}):
        sel = sorted((c for c in cells if c["algo"] == algo and c["n"] == n),
                     key=lambda c: c["k"])
        name = "pipelined" if algo == "ps_pipe" else "push-then-pull"
        line = ax.plot([c["k"] for c in sel], [c["ps_over_ring"] for c in sel], marker="o",
                       label=f"{name} N={n}")[0]
        ps_key = "ps-pipe" if algo == "ps_pipe" else "ps-sync"
        if ps_key in fits and "mpi4py" in fits:
            ps_p = model.Params(**{x: fits[ps_key][x] for x in ("a", "B", "g")})
            ring_p = model.Params(**{x: fits["mpi4py"][x] for x in ("a", "B", "g")})
            ks = list(range(1, max(c["k"] for c in sel) + 1))
            ax.plot(ks, [model.ps_time(ps_p, size, n, k, pipelined=algo == "ps_pipe")
                         / model.ring_time(ring_p, size, n) for k in ks], ls=":",
                    color=line.get_color())
    for n in sorted({c["n"] for c in cells if c["algo"] == "ps_pipe"}):
        ks = list(range(1, max(c["k"] for c in cells) + 1))
        ideal = [max(1.0, n / k) / (2.0 * (n - 1) / n) for k in ks]
        ax.plot(ks, ideal, color="grey", lw=0.8, ls="--")
        ax.annotate(f"ideal pipelined N={n}", (ks[-1], ideal[-1]), fontsize=6, color="grey")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set(xlabel="PS shards k", ylabel="PS time / ring time (dotted: fitted model, "
           "dashed: bandwidth terms only)", yscale="log",
           title=f"PS vs ring at {size / 2**20:g} MiB")
    dress(ax)
    return save_figure(plt, fig, path)


def write_plots(run_dir: Path, res: dict[str, Any]) -> list[Path]:
    out = []
    for name, fn in (("bandwidth_vs_size.png", bandwidth_vs_size),
                     ("time_vs_n.png", time_vs_n), ("ps_ring_vs_k.png", ps_ring_vs_k)):
        p = fn(run_dir / name, res)
        if p is not None:
            out.append(p)
    return out
