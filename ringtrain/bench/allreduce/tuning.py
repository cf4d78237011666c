"""The Horovod tuning ladder: why Horovod's all-reduce trails raw mpi4py, step by step.

Each variant is one job on the same N local ranks, at 4 KiB (latency) and 64 MiB (bandwidth);
variants are alternated round after round so the machine's load hits them alike. What the
ladder separates (docs/BENCH.md has the measured table):

* ``op=Average`` (Horovod's default) adds a scaling pass over the result;
* eager vs ``tf.function``: per-call Python/TF dispatch;
* the buffers: numpy asks the kernel for transparent huge pages (``MADV_HUGEPAGE``) on large
  arrays, TF's allocator (glibc malloc) does not, so TF tensors sit on 4 KiB pages: more TLB
  misses in the copy-bound shared-memory transport and thousands of page faults per call for
  freshly mapped outputs and Open MPI's temporary buffers. ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
  makes malloc request huge pages too (for every process it is set in: mpi4py as well);
* ``HOROVOD_CYCLE_TIME``: how long Horovod's background thread sleeps between negotiations
  (latency of small tensors);
* Horovod idle in the same process as an mpi4py all-reduce: its background thread's negotiation
  over MPI slows the foreground MPI call down.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ringtrain.bench.allreduce.harness import Job, Round, Target, env_tuple, run_round, sizes_arg
from ringtrain.bench.allreduce.suite import COMMON_ENV as THP  # the suite's baseline: huge pages
from ringtrain.bench.model import costmodel as model

SIZES = (4096, 64 * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    impl: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""


LADDER: tuple[Variant, ...] = (
    Variant("mpi4py", "mpi4py", note="raw MPI, default malloc"),
    Variant("mpi4py+thp", "mpi4py", env=env_tuple(THP), note="raw MPI, huge pages"),
    Variant("hvd naive", "horovod-eager", ("--average",),
            note="eager, op=Average (Horovod's default)"),
    Variant("hvd eager sum", "horovod-eager", note="eager, op=Sum"),
    Variant("hvd tf.function sum", "horovod", note="inside tf.function, op=Sum"),
    Variant("hvd tuned", "horovod", env=env_tuple(THP),
            note="tf.function, op=Sum, huge pages"),
    Variant("hvd tuned cycle 0.1ms", "horovod",
            env=env_tuple({**THP, "HOROVOD_CYCLE_TIME": "0.1"}),
            note="as tuned, HOROVOD_CYCLE_TIME=0.1"),
    Variant("mpi4py, hvd idle", "mpi4py-hvd-idle", env=env_tuple(THP),
            note="mpi4py+thp with Horovod initialised in the process"),
)


def variant_job(v: Variant, n: int, sizes: Sequence[int], reps: int, mpi_ring: bool) -> Job:
    argv = ("--impl", v.impl, "--sizes", sizes_arg(sizes), "--warmup", "3",
            "--reps", str(reps), *v.args)
    return Job("ringtrain.bench.allreduce.ring_runner", argv, n, env=v.env, timeout=600,
               mpi_ring=mpi_ring)


def run_ladder(target: Target, n: int, rounds: int, reps: int, *, quiet_wait: float,
               mpi_ring: bool = True, ladder: Sequence[Variant] = LADDER,
               on_round: Callable[[Round], None] | None = None) -> list[dict[str, Any]]:
    """Every variant ``rounds`` times, alternated; returns one row per (variant, size)."""
    times: dict[tuple[str, int], list[float]] = {}
    accepted: dict[str, int] = {}
    for i in range(rounds):
        for v in ladder:
            rnd = run_round(target, variant_job(v, n, SIZES, reps, mpi_ring),
                            f"tune {v.name} #{i + 1}", quiet_wait=quiet_wait)
            if on_round is not None:
                on_round(rnd)
            accepted[v.name] = accepted.get(v.name, 0) + int(rnd.accepted)
            if not rnd.accepted:
                continue
            for row in rnd.rows:
                times.setdefault((v.name, int(row["bytes"])), []).extend(row["times"])
    rows: list[dict[str, Any]] = []
    for v in ladder:
        for size in SIZES:
            t = times.get((v.name, size), [])
            med = statistics.median(t) if t else None
            rows.append({"variant": v.name, "note": v.note, "bytes": size, "n": n,
                         "median_s": med, "best_s": min(t) if t else None,
                         "busbw_Bps": model.busbw(size, med, n) if med else None,
                         "accepted_rounds": accepted.get(v.name, 0), "rounds": rounds})
    base: dict[int, dict[str, Any]] = {r["bytes"]: r for r in rows
                                       if r["variant"] == "mpi4py+thp"}
    for r in rows:
        b = base.get(r["bytes"])
        r["vs_mpi4py_thp"] = (b["median_s"] / r["median_s"]
                              if b and b["median_s"] and r["median_s"] else None)
    return rows


def render(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Horovod tuning ladder ({meta['id']})", "",
             f"N={meta['n']} local ranks, {meta['rounds']} alternated rounds x {meta['reps']} "
             f"timed iterations; only accepted rounds pooled; versions: {meta['versions']}; "
             f"transparent huge pages: {meta['thp']}.", "",
             "| variant | what | size | median ms | best ms | busbw GB/s | "
             "vs mpi4py+thp | accepted rounds |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        med = "-" if r["median_s"] is None else f"{r['median_s'] * 1e3:.3f}"
        best = "-" if r["best_s"] is None else f"{r['best_s'] * 1e3:.3f}"
        bus = "-" if r["busbw_Bps"] is None else f"{r['busbw_Bps'] / 1e9:.3f}"
        vs = "-" if r["vs_mpi4py_thp"] is None else f"{r['vs_mpi4py_thp']:.2f}"
        lines.append(f"| {r['variant']} | {r['note']} | {r['bytes']} | {med} | {best} | {bus} | "
                     f"{vs} | {r['accepted_rounds']}/{r['rounds']} |")
    return "\n".join(lines) + "\n"


def run_and_write(target: Target, n: int, rounds: int, reps: int, *, quiet_wait: float,
                  runs_dir: Path, on_round: Callable[[Round], None] | None = None
                  ) -> tuple[Path, list[dict[str, Any]]]:
    from ringtrain.bench.allreduce import benchrun as session

    run_id, run_dir = session.new_run_dir(runs_dir, "bench-tune")
    rows = run_ladder(target, n, rounds, reps, quiet_wait=quiet_wait, on_round=on_round)
    meta = {"id": run_id, "n": n, "rounds": rounds, "reps": reps,
            "versions": session.versions(), "thp": session.thp_mode(),
            "ladder": [asdict(v) for v in LADDER]}
    (run_dir / "tune.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (run_dir / "tune.md").write_text(render(rows, meta))
    return run_dir, rows
