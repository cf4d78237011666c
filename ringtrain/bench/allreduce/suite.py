"""The benchmark sweeps: which jobs run, where their ranks go, and the cells they produce.

* ring: one job per (implementation, N) over all sizes: mpi4py (raw MPI), Horovod's TF op inside
  ``tf.function`` with the tuned settings (``TUNED_ENV``), Horovod over Gloo;
* PS: one job per (N, k) over all sizes and both modes (push-then-pull and pipelined); on a
  simulated cluster the k shards get hosts of their own, after the N workers' hosts;
* target pairs: mpi4py and Horovod at 64 MiB on the same N ranks, alternated job by job;
* ceilings: raw MPI point-to-point between two ranks (on a sim cluster: over one shaped link).

Every job runs as a round (``harness.run_round``): bracketed by ceiling probes and repeated when
the machine's load moved the ceilings. A cell is one (algorithm, implementation, N, k, size)
with every timed iteration, its median and best, algbw and busbw.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringtrain.bench.allreduce.harness import Job, Round, Target, env_tuple, run_round, sizes_arg
from ringtrain.bench.model import costmodel as model
from ringtrain.bench.model.analysis import TARGET_BYTES
from ringtrain.errors import UsageError

log = logging.getLogger(__name__)

RING = "ringtrain.bench.allreduce.ring_runner"
PS = "ringtrain.bench.allreduce.ps_runner"
MIB = 1024 * 1024

# Found by the tuning ladder (tuning.py, `ringtrain bench tune`, docs/BENCH.md): malloc asks for
# transparent huge pages. Set for every job (mpi4py and PS too), so the baseline is tuned alike.
COMMON_ENV: dict[str, str] = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
# Horovod-only settings on top (none needed: tf.function and op=Sum are in ring_runner itself).
TUNED_ENV: dict[str, str] = {}
TUNED_ARGS: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BenchConfig:
    sizes: tuple[int, ...]
    ns: tuple[int, ...] = (2,)
    ks: tuple[int, ...] = (1, 2)
    ps_ns: tuple[int, ...] | None = None  # workers for the PS sweep (default: ns)
    impls: tuple[str, ...] = ("mpi4py", "horovod", "gloo")
    ps_modes: tuple[str, ...] = ("sync", "pipe")
    warmup: int = 3
    reps: int = 10
    chunk_bytes: int = 256 * 1024
    window: int = 4
    tolerance: float = 0.25
    attempts: int = 3
    quiet_wait: float = 0.0
    foreign_max: float = 0.1
    mpi_ring: bool = True
    timeout: float = 900.0
    target_pairs: int = 3
    common_env: tuple[tuple[str, str], ...] = field(default_factory=lambda: env_tuple(COMMON_ENV))
    horovod_env: tuple[tuple[str, str], ...] = field(default_factory=lambda: env_tuple(TUNED_ENV))
    horovod_args: tuple[str, ...] = TUNED_ARGS

    def as_dict(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes), "ns": list(self.ns), "ks": list(self.ks),
                "ps_ns": list(self.ps_ns or self.ns),
                "impls": list(self.impls), "ps_modes": list(self.ps_modes),
                "warmup": self.warmup, "reps": self.reps, "chunk_bytes": self.chunk_bytes,
                "window": self.window, "tolerance": self.tolerance, "attempts": self.attempts,
                "quiet_wait": self.quiet_wait, "foreign_max": self.foreign_max,
                "mpi_allreduce": "ring" if self.mpi_ring else "open-mpi-default",
                "target_pairs": self.target_pairs, "common_env": dict(self.common_env),
                "horovod_env": dict(self.horovod_env),
                "horovod_args": list(self.horovod_args)}


def _placement(target: Target, count: int, offset: int = 0) -> tuple[int, ...]:
    if not target.remote:
        return ()
    if offset + count > len(target.addresses):
        raise UsageError(
            f"{offset + count} simulated hosts needed (one rank per host), "
            f"the cluster has {len(target.addresses)}",
            "bring up more hosts (--sim-hosts) or ask for fewer workers/shards")
    return tuple(range(offset, offset + count))


def ring_job(cfg: BenchConfig, target: Target, impl: str, n: int, sizes: Sequence[int],
             reps: int | None = None) -> Job:
    env = dict(cfg.common_env)
    args: tuple[str, ...] = ()
    if impl in ("horovod", "gloo"):
        env.update(cfg.horovod_env)
        args = cfg.horovod_args
    argv = ("--impl", impl, "--sizes", sizes_arg(sizes), "--warmup", str(cfg.warmup),
            "--reps", str(reps or cfg.reps), *args)
    return Job(RING, argv, n, env=env_tuple(env), hosts=_placement(target, n),
               timeout=cfg.timeout, mpi_ring=cfg.mpi_ring, gloo=impl == "gloo")


def ps_job(cfg: BenchConfig, target: Target, n: int, k: int) -> Job:
    argv = ("--shards", str(k), "--sizes", sizes_arg(cfg.sizes), "--modes", ",".join(cfg.ps_modes),
            "--chunk-bytes", str(cfg.chunk_bytes), "--window", str(cfg.window),
            "--warmup", str(max(1, cfg.warmup - 1)), "--reps", str(cfg.reps),
            "--advertise", "hostname" if target.remote else "loopback")
    hosts = (*_placement(target, k, offset=n), *_placement(target, n)) if target.remote else ()
    return Job(PS, argv, n + k, env=cfg.common_env, hosts=hosts, timeout=cfg.timeout,
               mpi_ring=cfg.mpi_ring)


def cell(row: dict[str, Any], round_no: int, accepted: bool) -> dict[str, Any]:
    """A RESULT row as a report cell: stats, nccl-tests algbw/busbw (of the median time)."""
    impl, n = row["impl"], int(row["ranks"])
    if impl == "ps-grpc":
        algo, k = ("ps" if row["mode"] == "sync" else "ps_pipe"), int(row["shards"])
    else:
        algo, k = ("p2p" if impl == "p2p" else "ring"), 0
    times = [float(t) for t in row["times"]]
    med, best, nbytes = statistics.median(times), min(times), int(row["bytes"])
    out = {"algo": algo, "impl": impl, "n": n, "k": k, "bytes": nbytes, "median_s": med,
           "best_s": best, "algbw_Bps": model.algbw(nbytes, med),
           "busbw_Bps": model.busbw(nbytes, med, n) if algo != "p2p" else nbytes / med,
           "times": times, "round": round_no, "accepted": accepted}
    if row.get("warmup"):
        out["warmup"] = row["warmup"]
    return out


@dataclass
class Collector:
    """Rounds and cells gathered so far (the order jobs ran in)."""

    rounds: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    on_round: Callable[[Round], None] | None = None

    def add(self, rnd: Round, kind: str) -> None:
        no = len(self.rounds)
        self.rounds.append({**rnd.as_dict(), "kind": kind})
        self.cells += [{**cell(r, no, rnd.accepted), "kind": kind} for r in rnd.rows]
        if self.on_round is not None:
            self.on_round(rnd)

    def run(self, target: Target, job: Job, label: str, kind: str, cfg: BenchConfig) -> None:
        self.add(run_round(target, job, label, tolerance=cfg.tolerance, attempts=cfg.attempts,
                           quiet_wait=cfg.quiet_wait, foreign_max=cfg.foreign_max), kind)


def run_ring(cfg: BenchConfig, target: Target, col: Collector) -> None:
    for n in cfg.ns:
        for impl in cfg.impls:
            col.run(target, ring_job(cfg, target, impl, n, cfg.sizes), f"ring {impl} N={n}",
                    "sweep", cfg)


def run_ps(cfg: BenchConfig, target: Target, col: Collector) -> None:
    for n in cfg.ps_ns or cfg.ns:
        for k in cfg.ks:
            col.run(target, ps_job(cfg, target, n, k), f"ps N={n} k={k}", "sweep", cfg)


def run_target_pairs(cfg: BenchConfig, target: Target, col: Collector, n: int = 2) -> None:
    """mpi4py and Horovod at 64 MiB on the same ranks, alternated ``target_pairs`` times."""
    for i in range(cfg.target_pairs):
        for impl in ("mpi4py", "horovod"):
            job = ring_job(cfg, target, impl, n, [TARGET_BYTES])
            col.run(target, job, f"target {impl} N={n} #{i + 1}", "target", cfg)


def run_p2p(cfg: BenchConfig, target: Target, col: Collector) -> None:
    sizes = [s for s in cfg.sizes if s >= 4 * MIB][-2:] or [max(cfg.sizes)]
    job = ring_job(cfg, target, "p2p", 2, sizes, reps=max(3, cfg.reps // 2))
    col.run(target, job, "ceiling p2p", "ceiling", cfg)
