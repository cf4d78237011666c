"""``bench project --plot PATH``: predicted against published efficiency (matplotlib, Agg).

One point per model and GPU count at (published, predicted), the bar through it spanning the
prediction over every combination of the public alternatives; the diagonal and the +-5 point
band of the goal."""

from __future__ import annotations

from pathlib import Path

from ringtrain.bench.figures import dress, pyplot, save_figure
from ringtrain.bench.model import public_inputs as pi
from ringtrain.bench.model.gpu_report import TOLERANCE, GpuReport

MARKERS = {"resnet101": "o", "inception3": "s", "vgg16": "^"}
SHIFT = {"resnet101": -0.006, "inception3": 0.0, "vgg16": 0.006}  # points at one x apart


def plot(report: GpuReport, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    line = [0.3, 1.0]
    ax.plot(line, line, color="black", lw=1, label="predicted = published")
    ax.fill_between(line, [x - TOLERANCE for x in line], [x + TOLERANCE for x in line],
                    color="grey", alpha=0.2, label=f"within {100 * TOLERANCE:.0f} points")
    colours = {512: "tab:blue", 128: "tab:orange"}
    for r in report.rows:
        p = r.prediction
        eff = p.efficiency
        x = r.published + SHIFT[p.model] + (0.003 if p.gpus == 128 else 0.0)
        ax.errorbar([x], [eff], yerr=[[eff - r.low], [r.high - eff]],
                    fmt=MARKERS[p.model], color=colours.get(p.gpus, "tab:green"), capsize=3,
                    label=f"{pi.LABELS[p.model]}, {p.gpus} GPUs")
    ax.set_xlim(0.3, 1.0)
    ax.set_ylim(0.3, 1.02)
    ax.set_xlabel("published scaling efficiency (Horovod)")
    ax.set_ylabel("predicted from public inputs (bar: public alternatives)")
    ax.set_title("Horovod on P100s, RoCE 25 Gbit/s: predicted vs published")
    dress(ax)
    return save_figure(plt, fig, path)
