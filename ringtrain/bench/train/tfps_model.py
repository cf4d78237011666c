"""TensorFlow's ParameterServerStrategy as measured, beside the push-then-pull model (issue 28,
item 3). Pure: rows in, rows out.

The push-then-pull model (``costmodel``, algorithm ``ps``) has each ps link carry every
worker's push and then every worker's pull, one direction at a time, at the full link rate:
2 max(1, N/k) S/B. On shaped links TF's PS differs in ways each measured by a cell of its own
(docs/BENCH.md):

- **The transport and fan-in**, isolated by one worker (N = 1, so nobody shares a link):
  with k = 1 its exchange is exactly one serial pull and push of S through one link, so gRPC
  moves e(1) = 2 S / (B x exchange) of the link's rate. With k = f shards the worker pulls
  from f servers at once: f flows into its one link (incast on the link's short queue), then
  pushes as before, so the pull moves e(f) = S / (B x (exchange - S / (e(1) B))).
- **Each worker pulls every variable, then pushes a gradient for each**, one after the other
  on its own link: S/(e(k) B) + S/(e(1) B).
- **A ps link carries N S/k each way**: in from N workers at once, S N/(k e(N) B); out as
  one sender, N S/(k e(1) B).
- **Where the ps links bound the step, the workers fall out of phase**: the servers queue
  them, so one worker's pull runs beside another's push and a ps link is used both ways at
  once. The exchange is then the busier direction of a ps link.
- **Where the workers' own links bound it, the workers stay in phase**, as the coordinator
  dispatched their steps: all pull at once, then all push at once, and each phase takes as
  long as its slower side (a worker's link or a ps link).

The switch between the two is abrupt: where a ps link's busier direction just reaches a
worker's pull plus push, the in-phase form can be up to twice the out-of-phase one, so the
model is least sure near that boundary (about k = N/2), and may even order two k there the
wrong way round. No number is fitted to the cells it predicts: e(f) come from the N = 1 cells
of the same run. The latency and reduction terms (a, g) are left out: on these links the
exchange is all bandwidth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

WORKER_LINKS = "the workers' links: in phase, all pull then all push"
PS_LINKS = "the ps links: out of phase, both ways at once"


def _one_worker(rows: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(r["k"]): r for r in rows
            if "error" not in r and "exchange_s" in r and r["strategy"] == "tf-ps"
            and int(r["workers"]) == 1 and float(r["exchange_s"]) > 0}


def efficiencies(rows: Sequence[dict[str, Any]], link_bps: float) -> dict[int, float]:
    """e(f), the share of the link's rate moved with f flows into it, from the one-worker
    cells (k = f); empty without the k = 1 cell."""
    one = _one_worker(rows)
    if 1 not in one or link_bps <= 0:
        return {}
    nbytes = float(one[1]["param_bytes"])
    e1 = 2.0 * nbytes / (link_bps * float(one[1]["exchange_s"]))
    out = {1: e1}
    for f, row in sorted(one.items()):
        pull = float(row["exchange_s"]) - nbytes / (e1 * link_bps)
        if f > 1 and pull > 0:
            out[f] = nbytes / (link_bps * pull)
    return out


def exchange(nbytes: float, n: int, k: int, link_bps: float, e: Mapping[int, float]
             ) -> tuple[float, str] | None:
    """TF's PS exchange of ``nbytes`` in one worker's step and the links that set it; None
    when e(1), e(k) or e(N) was not measured."""
    if n < 1 or k < 1 or link_bps <= 0:
        raise ValueError(f"N={n}, k={k}, B={link_bps}: all must be positive")
    if not {1, k, n} <= e.keys():
        return None
    unit = nbytes / link_bps
    pull, push = unit / e[k], unit / e[1]  # one worker's link
    ps_in, ps_out = n * unit / (k * e[n]), n * unit / (k * e[1])  # one ps link
    if max(ps_in, ps_out) >= pull + push:
        return max(ps_in, ps_out), PS_LINKS
    return max(pull, ps_out) + max(push, ps_in), WORKER_LINKS


def extend(rows: Sequence[dict[str, Any]], link_bps: float) -> list[dict[str, Any]]:
    """Every tf-ps row of N >= 2 with TF's PS model beside the push-then-pull one
    (``tfps_step_s``: T1 as the push-then-pull prediction used, plus the exchange;
    ``tfps_over_measured``, ``tfps_bound``); rows unchanged where e was not measured."""
    e = efficiencies(rows, link_bps)
    out = []
    for row in rows:
        cell = dict(row)
        modelled = (exchange(float(row["param_bytes"]), int(row["workers"]), int(row["k"]),
                             link_bps, e)
                    if (e and "error" not in row and row["strategy"] == "tf-ps"
                        and int(row["workers"]) >= 2 and "t1_used_s" in row) else None)
        if modelled is not None:
            step = float(row["t1_used_s"]) + modelled[0]
            cell.update(tfps_exchange_s=modelled[0], tfps_step_s=step, tfps_bound=modelled[1],
                        tfps_over_measured=step / float(row["step_s"]))
        out.append(cell)
    return out


def render(rows: Sequence[dict[str, Any]], link_bps: float, tolerance: float) -> list[str]:
    """The report's section on TF's PS: e(f) from the one-worker cells, and per tf-ps cell
    both models against the step measured."""
    cells = [r for r in rows if "tfps_step_s" in r]
    e = efficiencies(rows, link_bps)
    if not cells or not e:
        return []
    missing = [r for r in rows if "error" not in r and r["strategy"] == "tf-ps"
               and int(r["workers"]) >= 2 and "tfps_step_s" not in r]
    shares = ", ".join(f"e({f}) = {v:.2f}" for f, v in sorted(e.items()))
    lines = ["", "TF's parameter servers, modelled as measured (docs/BENCH.md): of B = "
             f"{link_bps / 1e6:.1f} MB/s, gRPC moves {shares} with f flows into a link (the "
             "one-worker cells, k = f). A worker pulls then pushes; a ps link takes N S/k each "
             "way; out of phase where the ps links bound the step, in phase where the "
             "workers' links do.", "",
             "| N | k | step ms | push-then-pull ms (pred/meas) | TF's PS ms (pred/meas) "
             "| bound |", "|---|---|---|---|---|---|"]
    for r in cells:
        lines.append(f"| {r['workers']} | {r['k']} | {r['step_s'] * 1e3:.1f} | "
                     f"{r['predicted_step_s'] * 1e3:.1f} ({r['predicted_over_measured']:.2f}) | "
                     f"{r['tfps_step_s'] * 1e3:.1f} ({r['tfps_over_measured']:.2f}) | "
                     f"{r['tfps_bound']} |")
    within = sum(abs(r["tfps_over_measured"] - 1) <= tolerance for r in cells)
    before = sum(abs(r["predicted_over_measured"] - 1) <= tolerance for r in cells)
    lines += ["", f"TF's PS model within {tolerance:.0%}: {within} of {len(cells)} cells "
              f"(push-then-pull: {before} of {len(cells)})."]
    if missing:
        lines.append(f"Not modelled ({len(missing)} cells: a fan-in with no one-worker cell): "
                     + ", ".join(f"N={r['workers']} k={r['k']}" for r in missing) + ".")
    return lines
