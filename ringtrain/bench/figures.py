"""Matplotlib figures for every benchmark (Agg backend: no display needed): the pyplot module,
a plot's grid and legend, and saving a figure as PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def dress(ax: Any) -> None:
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def save_figure(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
