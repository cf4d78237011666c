"""The pair matrix as a heat map (``ringcheck.png`` in the check's run directory): one row and
one column per host, each cell the pair's bandwidth; a slow host is a dark cross, a slow link
two dark cells."""

from __future__ import annotations

import io
import logging
from typing import Any

from ringtrain.ringcheck.outliers import Pair, RingVerdict

log = logging.getLogger(__name__)


def heat_map(verdict: RingVerdict, pairs: list[Pair]) -> bytes | None:
    """The picture as PNG bytes (written by the caller, through the open run directory);
    None without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415 - only when a picture is asked for

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the bench extra installs it
        log.warning("matplotlib is not installed: no ring check picture")
        return None
    n = len(verdict.hosts)
    grid: list[list[Any]] = [[float("nan")] * n for _ in range(n)]
    for p in pairs:
        grid[p.a][p.b] = grid[p.b][p.a] = p.bandwidth_Bps * 8 / 1e9
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * n, 0.9 + 0.5 * n))
    image = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(n), verdict.hosts, rotation=90, fontsize=7)
    ax.set_yticks(range(n), verdict.hosts, fontsize=7)
    top = max((p.bandwidth_Bps for p in pairs), default=1.0)
    for p in pairs:
        dark = p.bandwidth_Bps < 0.6 * top  # white on the dark cells, black on the light
        for i, j in ((p.a, p.b), (p.b, p.a)):
            ax.text(j, i, f"{p.bandwidth_Bps * 8 / 1e9:.2g}", ha="center", va="center",
                    fontsize=6, color="w" if dark else "k")
    slow = ", ".join(verdict.slow_hosts) or "none"
    ax.set_title(f"pair bandwidth, Gbit/s (slow hosts: {slow})", fontsize=8)
    fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()
