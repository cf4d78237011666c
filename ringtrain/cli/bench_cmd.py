"""``ringtrain bench``: ring all-reduce vs parameter server, measured against a cost model.

Outputs go to ``runs/bench-<id>/`` (results.json, cells.csv, report.md, PNG plots). Ranks are
started with mpirun on local slots, or one per simulated host (``--sim NAME``; needs root),
optionally with every link shaped by tc tbf (``--link-rate 400mbit``).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ringtrain.bench.units import parse_ints, parse_sizes
from ringtrain.cli.bench_campaign_cmd import campaign_cmd
from ringtrain.cli.bench_common import EPILOG, echo_round, terminable
from ringtrain.cli.bench_recovery_cmd import recovery_cmd
from ringtrain.cli.bench_train_cmd import project_cmd, train_cmd
from ringtrain.cli.options import stacked
from ringtrain.errors import UsageError

if TYPE_CHECKING:  # the bench modules need numpy (the [bench] extra): imported when run
    from ringtrain.bench.allreduce import harness, suite



def _sweep_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--sizes", default="4K..256M", show_default=True,
                     help="Bytes per worker: A..B (x4 steps) or a list (4K,64M)."),
        click.option("-n", "--workers", default="2", show_default=True,
                     help="Worker counts N: 2,4,8 or 2..8."),
        click.option("--reps", default=10, show_default=True, type=click.IntRange(1),
                     help="Timed iterations per cell (barrier before each)."),
        click.option("--warmup", default=3, show_default=True, type=click.IntRange(1),
                     help="Untimed iterations at least; all-reduce cells go on until their "
                     "times settle (the warm-up's count and cost are reported apart)."),
        click.option("--quiet-wait", default=20.0, show_default=True,
                     help="Seconds to wait, before each round, for the CPUs to go idle."),
        click.option("--foreign-max", default=0.1, show_default=True,
                     help="Reject a round when other processes used more of the machine."),
        click.option("--tolerance", default=0.25, show_default=True,
                     help="Reject a round when its ceilings drifted more than this."),
        click.option("--attempts", default=3, show_default=True, type=click.IntRange(1)),
        click.option("--mpi-allreduce", type=click.Choice(["ring", "default"]), default="ring",
                     show_default=True, help="Open MPI's all-reduce algorithm (tuned coll)."),
        click.option("--sim", "sim_name", metavar="NAME",
                     help="Run one rank per host of simulated cluster NAME (brought up if "
                          "down, and taken down after)."),
        click.option("--sim-hosts", type=click.IntRange(2, 99),
                     help="Hosts to bring up (default: max N + max k)."),
        click.option("--link-rate", help="Shape every simulated link (tc units: 400mbit)."),
        click.option("--runs-dir", default="runs", show_default=True,
                     type=click.Path(file_okay=False, path_type=Path)),
        click.option("--timeout", default=900.0, show_default=True,
                     help="Seconds one mpirun may take."),
    ]
    return stacked(*opts)(fn)


def _config(opts: dict[str, Any], **extra: Any) -> suite.BenchConfig:
    from ringtrain.bench.allreduce import suite  # noqa: PLC0415 - numpy only when a bench runs

    return suite.BenchConfig(
        sizes=parse_sizes(opts["sizes"]), ns=parse_ints(opts["workers"], "-n", 2, 64),
        reps=opts["reps"], warmup=opts["warmup"], tolerance=opts["tolerance"],
        attempts=opts["attempts"], quiet_wait=opts["quiet_wait"],
        foreign_max=opts["foreign_max"], mpi_ring=opts["mpi_allreduce"] == "ring",
        timeout=opts["timeout"], **extra)


@contextlib.contextmanager
def _target(opts: dict[str, Any], hosts_needed: int) -> Iterator[harness.Target]:
    from ringtrain.bench.allreduce import benchrun as session  # noqa: PLC0415 - see _config
    from ringtrain.bench.allreduce import harness  # noqa: PLC0415 - see _config

    if opts["sim_name"] is None:
        if opts["link_rate"]:
            raise UsageError("--link-rate shapes simulated links only", "add --sim NAME")
        yield harness.local_target()
        return
    hosts = opts["sim_hosts"] or hosts_needed
    if hosts < hosts_needed:
        raise UsageError(f"--sim-hosts {hosts}: this run needs {hosts_needed} hosts (one rank "
                         "per host; PS shards on hosts of their own)",
                         f"pass --sim-hosts {hosts_needed} or fewer workers/shards")
    with session.sim_target(opts["sim_name"], hosts, opts["link_rate"]) as target:
        yield target


def _run(parts: tuple[str, ...], cfg: suite.BenchConfig, opts: dict[str, Any],
         hosts_needed: int) -> None:
    from ringtrain.bench.allreduce import benchrun as session  # noqa: PLC0415 - see _config

    command = "ringtrain " + shlex.join(sys.argv[1:])
    with terminable(), _target(opts, hosts_needed) as target:
        click.echo(f"bench on {target.name}: parts {', '.join(parts)}; "
                   f"{len(cfg.sizes)} sizes x N={list(cfg.ns)}", err=True)
        run_dir, res = session.run(cfg, target, parts, opts["runs_dir"], command,
                                   on_round=echo_round)
    _summary(run_dir, res)


def _summary(run_dir: Path, res: dict[str, Any]) -> None:
    text = (run_dir / "report.md").read_text()
    targets = text.split("## Targets", 1)[1].split("##", 1)[0].strip() if "## Targets" in text \
        else ""
    click.echo(f"RDMA: {res['rdma']['summary']}")
    if targets:
        click.echo("Targets:\n" + targets)
    click.echo(f"report: {run_dir / 'report.md'}")


@click.group("bench", epilog=EPILOG)
def command() -> None:
    """Ring all-reduce (Horovod MPI/Gloo, mpi4py) vs parameter server (gRPC), with a cost
    model fitted by least squares, reports and plots under runs/bench-<id>/."""


@command.command("allreduce", epilog=EPILOG)
@click.option("--impl", default="mpi4py,horovod,gloo", show_default=True,
              help="Ring implementations: mpi4py, mpi4py-ring, horovod, horovod-eager, gloo.")
@_sweep_options
def allreduce_cmd(impl: str, **opts: Any) -> None:
    """Ring all-reduce sweep: every implementation x N x size, plus the raw MPI ceiling."""
    cfg = _config(opts, impls=tuple(impl.split(",")))
    _run(("p2p", "ring"), cfg, opts, max(cfg.ns))


def _ps_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("-k", "--shards", default="1,2", show_default=True,
                     help="PS shard counts k."),
        click.option("--ps-workers", help="Worker counts for the PS sweep (default: -n)."),
        click.option("--chunk", default="256K", show_default=True,
                     help="gRPC message payload limit (gRPC's own default limit is 4 MiB)."),
        click.option("--window", default=4, show_default=True,
                     help="RPCs in flight per worker and shard."),
    ]
    return stacked(*opts)(fn)


def _ps_config(opts: dict[str, Any], **extra: Any) -> suite.BenchConfig:
    ps_ns = parse_ints(opts["ps_workers"], "--ps-workers", 2, 64) if opts["ps_workers"] else None
    return _config(opts, ks=parse_ints(opts["shards"], "-k"), ps_ns=ps_ns,
                   chunk_bytes=parse_sizes(opts["chunk"])[0], window=opts["window"], **extra)


def _hosts_needed(cfg: suite.BenchConfig) -> int:
    return max(*cfg.ns, max(cfg.ps_ns or cfg.ns) + max(cfg.ks))


@command.command("ps", epilog=EPILOG)
@_ps_options
@_sweep_options
def ps_cmd(**opts: Any) -> None:
    """Parameter-server sweep (gRPC): push-then-pull and pipelined, N x k x size (and the
    mpi4py ring on the same sizes, for the PS/ring ratios)."""
    cfg = _ps_config(opts, impls=("mpi4py",))
    _run(("p2p", "ring", "ps"), cfg, opts, _hosts_needed(cfg))


@command.command("compare", epilog=EPILOG)
@click.option("--impl", default="mpi4py,horovod,gloo", show_default=True,
              help="Ring implementations: mpi4py, mpi4py-ring, horovod, horovod-eager, gloo.")
@click.option("--target-pairs", default=3, show_default=True,
              help="Alternated mpi4py/Horovod rounds at 64 MiB (the 75% target; 0: skip).")
@_ps_options
@_sweep_options
def compare_cmd(impl: str, target_pairs: int, **opts: Any) -> None:
    """Everything: ring sweep, PS sweep, Horovod-vs-mpi4py target, fits, report, plots."""
    cfg = _ps_config(opts, impls=tuple(impl.split(",")), target_pairs=target_pairs)
    parts = ("p2p", "ring", "ps") + (("target",) if target_pairs else ())
    _run(parts, cfg, opts, _hosts_needed(cfg))


@command.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report_cmd(run_dir: Path) -> None:
    """Re-analyse RUN_DIR/results.json and rewrite report.md, cells.csv and the plots."""
    from ringtrain.bench.allreduce import benchrun as session  # noqa: PLC0415 - see _config

    for path in session.rerender(run_dir):
        click.echo(str(path))


@command.command("model")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def model_cmd(run_dir: Path, as_json: bool) -> None:
    """Fit the cost model to RUN_DIR's cells; print parameters, fit quality and crossovers."""
    from ringtrain.bench.model import analysis  # noqa: PLC0415 - see _config

    res = json.loads((run_dir / "results.json").read_text())
    out = analysis.analyse(res)
    if as_json:
        click.echo(json.dumps(out, indent=1, default=float))
        return
    for key, f in out["fits"].items():
        inv_g = f"{1 / f['g'] / 1e9:.2f} GB/s" if f["g"] > 0 else "inf"
        click.echo(f"{key:10s} a={f['a'] * 1e6:9.1f} us  B={f['B'] / 1e9:8.4f} GB/s  "
                   f"1/g={inv_g}  fitted {','.join(f['fitted'])}  rms {100 * f['rms_rel']:.1f}%"
                   f"  max {100 * f['max_rel']:.1f}%  ({f['samples']} cells)")
    for c in out["crossover"]:
        click.echo(f"N={c['n']} at {c['bytes']} B: pipelined PS beats ring for k > "
                   f"{c['ideal_k_above']:.2f} (ideal); predicted k={c['predicted_k']}, "
                   f"observed k={c['observed_k']}")



@command.command("tune", epilog=EPILOG)
@click.option("-n", "--workers", default=2, show_default=True, type=click.IntRange(2, 64))
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@click.option("--reps", default=10, show_default=True, type=click.IntRange(1))
@click.option("--quiet-wait", default=20.0, show_default=True)
@click.option("--runs-dir", default="runs", show_default=True,
              type=click.Path(file_okay=False, path_type=Path))
def tune_cmd(workers: int, rounds: int, reps: int, quiet_wait: float, runs_dir: Path) -> None:
    """Horovod vs raw mpi4py, one setting at a time (4 KiB and 64 MiB, local ranks)."""
    from ringtrain.bench.allreduce import harness, tuning  # noqa: PLC0415 - see _config

    with terminable():
        run_dir, _ = tuning.run_and_write(harness.local_target(), workers, rounds, reps,
                                          quiet_wait=quiet_wait, runs_dir=runs_dir,
                                          on_round=echo_round)
    click.echo((run_dir / "tune.md").read_text())


command.add_command(train_cmd)
command.add_command(project_cmd)
command.add_command(recovery_cmd)
command.add_command(campaign_cmd)
