"""One benchmark run end to end: run dir, ceilings, sweeps, analysis, outputs.

``run(...)`` creates ``runs/bench-<id>/``, measures the local ceilings, runs the requested parts
(ring sweep, PS sweep, Horovod-vs-mpi4py target pairs, raw MPI point-to-point), fits the cost
model and writes every output (``report.write_all``). ``sim_target(...)`` brings a simulated
cluster up (or reuses one), shapes its links for the run and restores them afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringtrain.bench.allreduce import ceilings, rdma, report, suite
from ringtrain.bench.allreduce.harness import Round, Target
from ringtrain.bench.model import analysis
from ringtrain.errors import RingtrainError, UsageError

if TYPE_CHECKING:
    from ringtrain.sim import SimCluster

log = logging.getLogger(__name__)

PARTS = ("p2p", "ring", "ps", "target")
PACKAGES = ("tensorflow-cpu", "tensorflow", "horovod", "mpi4py", "grpcio", "numpy", "matplotlib")


def new_run_dir(runs_dir: Path, prefix: str = "bench") -> tuple[str, Path]:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{secrets.token_hex(2)}"
    path = runs_dir / f"{prefix}-{run_id}"
    path.mkdir(parents=True, exist_ok=False)
    return run_id, path


def versions() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    if shutil.which("mpirun"):
        done = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                              timeout=30, check=False)
        first = (done.stdout.strip().splitlines() or ["?"])[0]
        out["mpirun"] = first.replace("mpirun (Open MPI) ", "Open MPI ")
    return out


def gpu_line() -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "none on this machine (no nvidia-smi): all runs use CPU tensors"
    done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=False)
    first = done.stdout.strip().splitlines()
    if done.returncode != 0 or not first:
        return "none usable (nvidia-smi -L failed): all runs use CPU tensors"
    return f"{first[0]} (the all-reduce benchmarks here use CPU tensors)"


def thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()


def local_ceilings(sizes: Sequence[int] = ()) -> dict[str, Any]:
    size = 64 * 1024 * 1024
    return {"memcpy_Bps": ceilings.memcpy_bps(size), "reduce_g": ceilings.reduce_g(size),
            "memcpy_by_size": {str(s): ceilings.memcpy_bps(max(s, 4096), repeats=7)
                               for s in sizes},
            "tcp_loopback_Bps": ceilings.tcp_loopback_bps(size),
            "load_start": ceilings.load().as_dict()}


def _p2p_ceilings(cells: list[dict[str, Any]], target: Target) -> list[dict[str, Any]]:
    where = "one simulated link" if target.remote else "2 local ranks"
    return [{"bytes": c["bytes"], "Bps": c["bytes"] / c["median_s"], "where": where}
            for c in cells if c["algo"] == "p2p"]


def run(cfg: suite.BenchConfig, target: Target, parts: tuple[str, ...], runs_dir: Path,
        command: str, on_round: Callable[[Round], None] | None = None
        ) -> tuple[Path, dict[str, Any]]:
    """Run the benchmark ``parts`` on ``target``; returns the run dir and the results."""
    run_id, run_dir = new_run_dir(runs_dir)
    res: dict[str, Any] = {
        "id": run_id, "created": dt.datetime.now().isoformat(timespec="seconds"),
        "command": command, "target": target.as_dict(), "config": cfg.as_dict(),
        "versions": versions(), "rdma": rdma.detect().as_dict(), "gpu": gpu_line(),
        "ceilings": local_ceilings(cfg.sizes), "parts": list(parts),
        "transparent_hugepages": thp_mode()}
    col = suite.Collector(on_round=on_round)
    steps = {"p2p": suite.run_p2p, "ring": suite.run_ring, "ps": suite.run_ps,
             "target": suite.run_target_pairs}
    for part in PARTS:
        if part in parts:
            steps[part](cfg, target, col)
    res["ceilings"]["mpi_p2p"] = _p2p_ceilings(col.cells, target)
    res["ceilings"]["load_end"] = ceilings.load().as_dict()
    res.update(rounds=col.rounds, cells=col.cells)
    res["analysis"] = analysis.analyse(res)
    report.write_all(run_dir, res)
    return run_dir, res


def rerender(run_dir: Path) -> list[Path]:
    """Re-run the analysis and rewrite the outputs from ``run_dir/results.json``."""
    import json

    res = json.loads((run_dir / "results.json").read_text())
    res["analysis"] = analysis.analyse(res)
    return report.write_all(run_dir, res)


def cluster_target(cluster: SimCluster, rate_bits: int | None) -> Target:
    """A target with one rank per host of ``cluster`` (links shaped to ``rate_bits``/s)."""
    return Target(name=f"sim:{cluster.name}", addresses=tuple(h.address for h in cluster.hosts),
                  mca=cluster.mpirun_mca_args, gloo_iface="eth0",
                  launcher_address=cluster.bridge_address,
                  link_bps=rate_bits / 8 if rate_bits else None, cores=os.cpu_count() or 1,
                  netns_paths=tuple(f"/run/netns/{h.netns}" for h in cluster.hosts))


@contextlib.contextmanager
def sim_target(name: str, hosts: int, link_rate: str | None) -> Iterator[Target]:
    """A target with one rank per host of ``shaped_sim(name, hosts, link_rate)``."""
    from ringtrain.sim import shaping

    with shaped_sim(name, hosts, link_rate) as cluster:
        yield cluster_target(cluster, shaping.parse_rate(link_rate) if link_rate else None)


@contextlib.contextmanager
def shaped_sim(name: str, hosts: int, link_rate: str | None) -> Iterator[SimCluster]:
    """Simulated cluster ``name`` with at least ``hosts`` hosts and every link shaped to
    ``link_rate`` (tc units) for the duration. A cluster this brought up is taken down
    afterwards; one that was up stays up (a too small one is an error, never rebuilt: it may be
    someone else's). Shaping is always removed."""
    from ringtrain import sim
    from ringtrain.sim import shaping

    cfg = sim.SimConfig(name=name, hosts=hosts, gpus_per_host=0)
    existing = sim.load(cfg)
    if existing is not None and len(existing.hosts) < hosts:
        raise UsageError(f"sim cluster {name!r} is up with {len(existing.hosts)} hosts; this "
                         f"benchmark needs {hosts}",
                         f"pass another --sim name, or `ringtrain sim down --name {name}`")
    started = existing is None
    cluster = sim.up(cfg) if existing is None else existing
    try:
        shaping.set_all_link_rates(cluster.config, link_rate)
        yield cluster
    finally:
        try:
            shaping.set_all_link_rates(cluster.config, None)
        except RingtrainError as err:
            log.warning("could not remove link shaping: %s", err)
        if started:
            sim.down(cluster.config)
