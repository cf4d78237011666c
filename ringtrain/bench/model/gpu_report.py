"""``ringtrain bench project`` from public inputs: the tables as values, then as text (pure).

``build()`` predicts every model at every published GPU count (gpu_projection.py on
public_inputs.py), with the parameter-server alternative on the same hardware, each input's
sensitivity (x0.8 and x1.2 alone), and the prediction under every combination of the public
alternatives (the range). ``render()`` draws it; ``GpuReport.as_dict()`` is the --json form.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

from ringtrain.bench.model import gpu_projection as gp
from ringtrain.bench.model import public_inputs as pi

TOLERANCE = 0.05  # the goal: within 5 points of the published efficiency
KS = (32, 64, 128, 256)
INPUT_NAMES = {
    "step_s": "T_1 (one GPU's step)", "grad_bytes": "gradient bytes",
    "net_Bps": "network bandwidth", "net_lat_s": "network latency per step",
    "intra_Bps": "in-server bandwidth", "intra_lat_s": "in-server latency per step",
    "call_lat_s": "latency per NCCL call", "fusion_bytes": "fusion buffer",
    "cycle_s": "Horovod cycle time", "bwd_per_fwd": "backward/forward FLOPs",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One model at one GPU count: the prediction, the published figure, the public range."""

    prediction: gp.Prediction
    published: float
    source: str
    low: float  # lowest efficiency over every combination of ALTERNATIVES
    high: float
    alternatives: dict[str, float]  # one alternative alone -> efficiency
    step_for_published_s: float | None  # the T_1 at which the model gives the published figure
    ps: dict[int, float]  # k -> efficiency of the push-then-pull PS
    sensitivity: tuple[gp.Sensitivity, ...]

    @property
    def met(self) -> bool:
        return abs(self.prediction.efficiency - self.published) <= TOLERANCE + 1e-9

    @property
    def in_range(self) -> bool:
        return self.low - 1e-9 <= self.published <= self.high + 1e-9


@dataclass(frozen=True, slots=True)
class GpuReport:
    rows: tuple[Row, ...]
    cluster: gp.Cluster

    def as_dict(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            d = asdict(r)
            d["sensitivity"] = [{"input": s.name, "low": s.low, "high": s.high}
                                for s in r.sensitivity]
            d["ps"] = {str(k): v for k, v in r.ps.items()}
            d["met"], d["published_in_range"] = r.met, r.in_range
            rows.append(d)
        return {"setup": setup_line(self.cluster), "cluster": asdict(self.cluster),
                "sensitivity_step": 0.2, "tolerance": TOLERANCE, "rows": rows,
                "alternatives": pi.ALTERNATIVES,
                "sources": [asdict(s) for s in pi.SOURCES]}


def step_for(w: gp.Workload, c: gp.Cluster, target: float) -> float | None:
    """The T_1 at which the model predicts ``target`` (bisection over a scale of T_1), or
    None when no T_1 from 1/100 to 100 times the given one does."""
    def eff(scale: float) -> float:
        return gp.predict(*gp.scaled(w, c, "step_s", scale)).efficiency

    lo, hi = 0.01, 100.0
    if not eff(lo) <= target <= eff(hi):
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eff(mid) < target else (lo, mid)
    return w.step_s * math.sqrt(lo * hi)


def build_row(model: str, gpus: int, *, ks: tuple[int, ...] = KS, rel: float = 0.2) -> Row:
    w, c = pi.workload(model), pi.cluster(gpus)
    pred = gp.predict(w, c)
    published = pi.PUBLISHED[gpus][model]
    names = tuple(pi.ALTERNATIVES)
    alone = {n: gp.predict(*pi.apply((n,), model, gpus)).efficiency for n in names}
    combos = [gp.predict(*pi.apply(sub, model, gpus)).efficiency
              for r in range(len(names) + 1) for sub in itertools.combinations(names, r)]
    return Row(prediction=pred, published=published, source=pi.PUBLISHED_SOURCE[gpus],
               low=min(combos), high=max(combos), alternatives=alone,
               step_for_published_s=step_for(w, c, published),
               ps={k: gp.predict_ps(w, c, k).efficiency for k in ks},
               sensitivity=tuple(gp.sensitivity(w, c, rel)))


def build(gpus: tuple[int, ...] = (512, 128), ks: tuple[int, ...] = KS) -> GpuReport:
    rows = tuple(build_row(m, g, ks=ks) for g in gpus for m in pi.MODELS)
    return GpuReport(rows=rows, cluster=pi.cluster(gpus[0]))


def setup_line(c: gp.Cluster) -> str:
    algo = "hierarchical all-reduce (PCIe in the server, ring between servers)" \
        if c.hierarchical else "one flat NCCL ring"
    return (f"{c.gpus} GPUs = {c.servers} servers x {c.gpus_per_server} P100, RoCE 25 Gbit/s; "
            f"{algo}; Horovod 2017: {c.fusion_bytes / 2**20:.0f} MiB fusion, "
            f"{c.cycle_s * 1e3:.0f} ms cycle")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _inputs(c: gp.Cluster) -> list[str]:
    ws = {m: pi.workload(m) for m in pi.MODELS}
    names = " / ".join(pi.LABELS[m] for m in pi.MODELS)
    rates = " / ".join(f"{pi.images_per_s(m):.1f}" for m in pi.MODELS)
    return [
        "| input | value | source |", "|---|---|---|",
        f"| one P100's img/s, batch {pi.BATCH}: {names} | {rates} (ResNet-101 interpolated "
        "between ResNet-50 and -152 by FLOPs) | tf-benchmarks, keras-apps |",
        "| T_1 = batch / img/s | " + " / ".join(f"{w.step_s:.3f} s" for w in ws.values())
        + " | |",
        "| gradient bytes = 4 x trainable parameters | "
        + " / ".join(f"{w.grad_bytes / 1e6:.1f} MB" for w in ws.values()) + " | keras-apps |",
        "| layers with weights (gradient order: last first) | "
        + " / ".join(str(len(w.units)) for w in ws.values()) + " | keras-apps |",
        f"| network, per server | {c.net_Bps / 1e9:.2f} GB/s (0.96 x 25 Gbit/s), "
        f"{c.net_lat_s * 1e6:.1f} us per ring step | nccl-nic, nccl-tuning |",
        f"| inside the server (PCIe) | {c.intra_Bps / 1e9:.0f} GB/s, "
        f"{c.intra_lat_s * 1e6:.1f} us per ring step | nccl-tuning |",
        f"| per NCCL call | {c.call_lat_s * 1e6:.1f} us | nccl-tuning |",
        f"| Horovod | {c.fusion_bytes / 2**20:.0f} MiB fusion buffer, {c.cycle_s * 1e3:.0f} ms "
        "cycle, negotiation 2 log2(N) network steps | horovod-0.21, horovod-fusion |",
        f"| backward / forward FLOPs per layer | {c.bwd_per_fwd:g} (first layer half) "
        "| backward-2x |",
    ]


def _results(rows: tuple[Row, ...]) -> list[str]:
    out = ["| GPUs | model | T_1 s | T_N s | all-reduce after backward s | no overlap | "
           "overlap (layer order) | published | diff | range (public alternatives) | "
           "T_1 giving published | within 5 points |", "|" + "---|" * 12]
    for r in rows:
        p = r.prediction
        need = "-" if r.step_for_published_s is None else f"{r.step_for_published_s:.3f} s"
        verdict = "met" if r.met else "**missed**"
        out.append(
            f"| {p.gpus} | {pi.LABELS[p.model]} | {p.step_1_s:.3f} | {p.step_n_s:.3f} | "
            f"{p.comm_s:.3f} | {_pct(p.efficiency_no_overlap)} | {_pct(p.efficiency)} | "
            f"{100 * r.published:.0f}% ({r.source}) | "
            f"{100 * (p.efficiency - r.published):+.1f} | {_pct(r.low)} - {_pct(r.high)} | "
            f"{need} | {verdict} |")
    return out


def _ps(rows: tuple[Row, ...]) -> list[str]:
    ks = sorted(rows[0].ps)
    out = ["| GPUs | model | ring (Horovod) | " + " | ".join(f"PS k={k}" for k in ks) + " |",
           "|" + "---|" * (3 + len(ks))]
    for r in rows:
        cells = " | ".join(_pct(r.ps[k]) for k in ks)
        out.append(f"| {r.prediction.gpus} | {pi.LABELS[r.prediction.model]} | "
                   f"{_pct(r.prediction.efficiency)} | {cells} |")
    return out


def _sensitivity(rows: tuple[Row, ...]) -> list[str]:
    gpus = rows[0].prediction.gpus
    first = [r for r in rows if r.prediction.gpus == gpus]
    by = {r.prediction.model: {s.name: s for s in r.sensitivity} for r in first}
    order = sorted(gp.SENSITIVE, key=lambda n: -max(by[m][n].spread for m in by))
    out = [f"| input (x0.8 / x1.2), {gpus} GPUs | "
           + " | ".join(pi.LABELS[m] for m in by) + " |", "|" + "---|" * (1 + len(by))]
    for name in order:
        cells = []
        for m, row in zip(by, first, strict=True):
            s, base = by[m][name], row.prediction.efficiency
            cells.append(f"{100 * (s.low - base):+.1f} / {100 * (s.high - base):+.1f}")
        out.append(f"| {INPUT_NAMES[name]} | " + " | ".join(cells) + " |")
    top = {m: max(by[m].values(), key=lambda s: s.spread).name for m in by}
    most = "; ".join(f"{pi.LABELS[m]}: {INPUT_NAMES[n]}" for m, n in top.items())
    return [*out, "", f"Moves it most: {most}."]


def _alternatives(rows: tuple[Row, ...]) -> list[str]:
    gpus = rows[0].prediction.gpus
    first = [r for r in rows if r.prediction.gpus == gpus]
    out = [f"| public alternative, {gpus} GPUs | "
           + " | ".join(pi.LABELS[r.prediction.model] for r in first) + " |",
           "|" + "---|" * (1 + len(first)),
           "| (base) | " + " | ".join(_pct(r.prediction.efficiency) for r in first) + " |"]
    for name, what in pi.ALTERNATIVES.items():
        out.append(f"| {what} | " + " | ".join(_pct(r.alternatives[name]) for r in first) + " |")
    out.append("| every combination: lowest - highest | "
               + " | ".join(f"{_pct(r.low)} - {_pct(r.high)}" for r in first) + " |")
    return out


def render(report: GpuReport) -> str:
    lines = ["Projection of Horovod's published benchmark from public inputs only "
             "(nothing measured here, nothing fitted)",
             f"Setup: {setup_line(report.cluster)}", "", "Inputs", "",
             *_inputs(report.cluster), "", "Predicted vs published", "",
             *_results(report.rows), "",
             "Parameter servers on the same hardware (push each gradient when ready, then pull "
             "all; k servers with a NIC each)", "", *_ps(report.rows), "",
             "Sensitivity: each input alone x0.8 and x1.2, change in predicted efficiency "
             "(points)", "", *_sensitivity(report.rows), "",
             "Public inputs with more than one published value", "",
             *_alternatives(report.rows), "", "Sources", "", "| key | where | what it gives |",
             "|---|---|---|", *(f"| {s.key} | {s.url} | {s.gives} |" for s in pi.SOURCES)]
    return "\n".join(lines)
