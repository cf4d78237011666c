"""``ringtrain bench``: ring all-reduce vs parameter server, measured against a cost model.

Outputs go to ``runs/bench-<id>/`` (results.json, cells.csv, report.md, PNG plots). Ranks are
started with mpirun on local slots, or one per simulated host (``--sim NAME``; needs root),
optionally with every link shaped by tc tbf (``--link-rate 400mbit``).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ringtrain.bench.units import parse_ints, parse_sizes
from ringtrain.cli.options import stacked
from ringtrain.errors import UsageError

if TYPE_CHECKING:  # the bench modules need numpy (the [bench] extra): imported when run
    from ringtrain.bench.allreduce import harness, suite
    from ringtrain.bench.model.costmodel import Params
    from ringtrain.bench.train.strategies import StrategyBench
    from ringtrain.hostfile import Inventory

_EPILOG = """\b
Examples:
  ringtrain bench allreduce -n 2 --sizes 4K..256M
  ringtrain bench ps -n 2 -k 1,2 --sizes 4K..64M
  ringtrain bench compare -n 2 -k 1,2                         local slots
  sudo ringtrain bench compare --sim rtbench --link-rate 200mbit --sizes 1M..16M
       -n 2,4,8 --ps-workers 2,4 -k 1..4 --impl mpi4py,mpi4py-ring,horovod,gloo
       --target-pairs 0                       (one command: simulated hosts, shaped links)
  ringtrain bench model runs/bench-<id>       refit, print fits and crossovers
  ringtrain bench report runs/bench-<id>      rewrite report.md, cells.csv and plots
  ringtrain bench tune -n 2                   Horovod vs mpi4py tuning ladder
  ringtrain bench train --model resnet50 -n 1,2
  ringtrain bench train --strategy horovod,tf-multiworker,tf-ps --ps 1,2 --model dense -n 2
  ringtrain bench project --run runs/bench-<id> --train runs/bench-train-<id>
"""


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


def _echo_round(rnd: harness.Round) -> None:
    state = "ok" if rnd.accepted else f"kept after {rnd.attempts} attempts (disturbed)"
    click.echo(f"  {rnd.label}: {rnd.seconds:.1f} s, foreign CPU {100 * rnd.foreign:.0f}%, "
               f"drift {100 * rnd.drift:.0f}% [{state}]", err=True)


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


@contextlib.contextmanager
def _terminable() -> Iterator[None]:
    """SIGTERM raises SystemExit, so running jobs are stopped and links unshaped on the way."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(parts: tuple[str, ...], cfg: suite.BenchConfig, opts: dict[str, Any],
         hosts_needed: int) -> None:
    from ringtrain.bench.allreduce import benchrun as session  # noqa: PLC0415 - see _config

    command = "ringtrain " + shlex.join(sys.argv[1:])
    with _terminable(), _target(opts, hosts_needed) as target:
        click.echo(f"bench on {target.name}: parts {', '.join(parts)}; "
                   f"{len(cfg.sizes)} sizes x N={list(cfg.ns)}", err=True)
        run_dir, res = session.run(cfg, target, parts, opts["runs_dir"], command,
                                   on_round=_echo_round)
    _summary(run_dir, res)


def _summary(run_dir: Path, res: dict[str, Any]) -> None:
    text = (run_dir / "report.md").read_text()
    targets = text.split("## Targets", 1)[1].split("##", 1)[0].strip() if "## Targets" in text \
        else ""
    click.echo(f"RDMA: {res['rdma']['summary']}")
    if targets:
        click.echo("Targets:\n" + targets)
    click.echo(f"report: {run_dir / 'report.md'}")


@click.group("bench", epilog=_EPILOG)
def command() -> None:
    """Ring all-reduce (Horovod MPI/Gloo, mpi4py) vs parameter server (gRPC), with a cost
    model fitted by least squares, reports and plots under runs/bench-<id>/."""


@command.command("allreduce", epilog=_EPILOG)
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


@command.command("ps", epilog=_EPILOG)
@_ps_options
@_sweep_options
def ps_cmd(**opts: Any) -> None:
    """Parameter-server sweep (gRPC): push-then-pull and pipelined, N x k x size (and the
    mpi4py ring on the same sizes, for the PS/ring ratios)."""
    cfg = _ps_config(opts, impls=("mpi4py",))
    _run(("p2p", "ring", "ps"), cfg, opts, _hosts_needed(cfg))


@command.command("compare", epilog=_EPILOG)
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



@command.command("tune", epilog=_EPILOG)
@click.option("-n", "--workers", default=2, show_default=True, type=click.IntRange(2, 64))
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@click.option("--reps", default=10, show_default=True, type=click.IntRange(1))
@click.option("--quiet-wait", default=20.0, show_default=True)
@click.option("--runs-dir", default="runs", show_default=True,
              type=click.Path(file_okay=False, path_type=Path))
def tune_cmd(workers: int, rounds: int, reps: int, quiet_wait: float, runs_dir: Path) -> None:
    """Horovod vs raw mpi4py, one setting at a time (4 KiB and 64 MiB, local ranks)."""
    from ringtrain.bench.allreduce import harness, tuning  # noqa: PLC0415 - see _config

    with _terminable():
        run_dir, _ = tuning.run_and_write(harness.local_target(), workers, rounds, reps,
                                          quiet_wait=quiet_wait, runs_dir=runs_dir,
                                          on_round=_echo_round)
    click.echo((run_dir / "tune.md").read_text())


@command.command("train", epilog=_EPILOG)
@click.option("--model", default=None,
              type=click.Choice(["resnet50", "resnet101", "vgg16", "digits", "dense", "conv"]),
              help="Horovod scaling: resnet50 (default), resnet101, vgg16, digits. With "
              "--strategy: dense (communication-bound, default) or conv (compute-bound).")
@click.option("--strategy", "strategies", metavar="LIST",
              help="Compare strategies on the same hosts instead: horovod,tf-multiworker,tf-ps "
              "(each cell launched by `ringtrain launch --strategy`), with the cost model's "
              "prediction per cell.")
@click.option("--ps", "ps_counts", default="1,2", show_default=True,
              help="With --strategy tf-ps: the parameter-server counts k to run.")
@click.option("--ps-hosts", type=click.Choice(["shared", "own"]), default="shared",
              show_default=True,
              help="With --strategy tf-ps: ps tasks beside the workers, or on the -H hosts "
              "after the workers' (each with a link of its own).")
@click.option("-H", "host_spec", metavar="h1:N,...",
              help="With --strategy: the hosts (default localhost:<largest -n>).")
@click.option("-F", "--ssh-config", type=click.Path(path_type=Path),
              help="With --strategy: ssh_config for the hosts (a simulated cluster's).")
@click.option("--known-hosts", type=click.Path(path_type=Path),
              help="With --strategy: known_hosts for the hosts.")
@click.option("--fit", "fit_run", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="With --strategy: the transport (a, B, g) from this compare run's Horovod "
              "fit, instead of TCP loopback and numpy's sum measured now.")
@click.option("--steps", default=20, show_default=True, type=click.IntRange(1),
              help="With --strategy: timed steps per worker.")
@click.option("--sim", "sim_name", metavar="NAME",
              help="With --strategy: the hosts of simulated cluster NAME (brought up if down, "
              "taken down after), one slot each.")
@click.option("--sim-hosts", type=click.IntRange(2, 99),
              help="With --sim: hosts to bring up (default: largest -n + 1 + largest --ps).")
@click.option("--link-rate", help="With --sim: shape every simulated link (tc units: 200mbit); "
              "the cost model's B is then this rate.")
@click.option("-n", "--workers", default="1,2", show_default=True)
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1))
@click.option("--image-size", default=224, show_default=True, type=click.IntRange(32))
@click.option("--batches", default=2, show_default=True, type=click.IntRange(1))
@click.option("--iters", default=3, show_default=True, type=click.IntRange(1))
@click.option("--quiet-wait", default=20.0, show_default=True)
@click.option("--runs-dir", default="runs", show_default=True,
              type=click.Path(file_okay=False, path_type=Path))
def train_cmd(model: str | None, strategies: str | None, ps_counts: str, ps_hosts: str,
              host_spec: str | None, ssh_config: Path | None, known_hosts: Path | None,
              fit_run: Path | None, steps: int, sim_name: str | None, sim_hosts: int | None,
              link_rate: str | None, workers: str, batch_size: int, image_size: int,
              batches: int, iters: int, quiet_wait: float, runs_dir: Path) -> None:
    """Synthetic-data training: images/s per worker and scaling efficiency X(N)/(N X(1));
    with --strategy, Horovod's ring against TensorFlow's MultiWorkerMirrored and parameter
    servers on the same hosts, measured and predicted."""
    if strategies is not None:
        sim = (sim_name, sim_hosts, link_rate) if sim_name else None
        if sim is None and (sim_hosts or link_rate):
            raise UsageError("--sim-hosts and --link-rate go with --sim NAME",
                             "add --sim NAME (a simulated cluster), or drop them")
        _strategies(model or "dense", strategies, ps_counts, ps_hosts, host_spec, ssh_config,
                    known_hosts, fit_run, steps, workers, batch_size, runs_dir, sim)
        return
    model = model or "resnet50"
    if model in ("dense", "conv"):
        raise UsageError(f"--model {model} is for --strategy runs",
                         "add --strategy horovod,tf-multiworker,tf-ps, or pick resnet50, "
                         "resnet101, vgg16 or digits")
    from ringtrain.bench.allreduce import harness, suite  # noqa: PLC0415 - see _config
    from ringtrain.bench.train import training  # noqa: PLC0415 - see _config

    cfg = training.TrainConfig(model=model, ns=parse_ints(workers, "-n", 1, 64),
                               batch_size=batch_size, image_size=image_size, batches=batches,
                               iters=iters, env=harness.env_tuple(suite.COMMON_ENV),
                               quiet_wait=quiet_wait)
    with _terminable():
        run_dir = training.run_and_write(cfg, harness.local_target(), runs_dir,
                                         on_round=_echo_round)
    click.echo((run_dir / "train.md").read_text())


def _strategies(model: str, strategies: str, ps_counts: str, ps_hosts: str,
                host_spec: str | None,
                ssh_config: Path | None, known_hosts: Path | None, fit_run: Path | None,
                steps: int, workers: str, batch_size: int, runs_dir: Path,
                sim: tuple[str, int | None, str | None] | None) -> None:
    from ringtrain.bench.allreduce import benchrun, ceilings  # noqa: PLC0415 - see _config
    from ringtrain.bench.model import costmodel  # noqa: PLC0415 - see _config
    from ringtrain.bench.model.projection_report import load_fit  # noqa: PLC0415
    from ringtrain.bench.train import strategies as bench  # noqa: PLC0415
    from ringtrain.hostfile import parse_host_spec  # noqa: PLC0415
    from ringtrain.sim import shaping  # noqa: PLC0415
    from ringtrain.spec import SshSpec, Strategy  # noqa: PLC0415

    if model not in ("dense", "conv"):
        raise UsageError(f"--model {model} is for Horovod scaling runs, not --strategy",
                         "pass --model dense (communication-bound) or conv (compute-bound)")
    names = tuple(s.strip() for s in strategies.split(",") if s.strip())
    known = [s.value for s in Strategy]
    if not names or any(n not in known for n in names):
        raise UsageError(f"--strategy {strategies}: choose from {', '.join(known)}",
                         "e.g. --strategy horovod,tf-multiworker,tf-ps")
    ns = parse_ints(workers, "-n", 1, 64)
    ks = parse_ints(ps_counts, "--ps", 1, 16)
    rate = None
    with contextlib.ExitStack() as stack, _terminable():
        if sim is not None:
            name, count, rate = sim
            cluster = stack.enter_context(benchrun.shaped_sim(
                name, count or max(ns) + 1 + max(ks), rate))
            hosts = parse_host_spec(",".join(f"{h}:1" for h in cluster.names))
            ssh = SshSpec(cluster.ssh_config, cluster.known_hosts)
        else:
            hosts = parse_host_spec(host_spec or f"localhost:{max(ns)}")
            ssh = SshSpec(ssh_config, known_hosts)
        if fit_run is not None:
            params, source = load_fit(fit_run, "horovod"), f"the Horovod fit of {fit_run}"
        else:
            link = shaping.parse_rate(rate) / 8 if rate else ceilings.tcp_loopback_bps()
            params = costmodel.Params(a=0.0, B=link, g=ceilings.reduce_g())
            source = "measured now: " + (f"B = the {rate} links shaped by tc" if rate
                                         else "B = TCP loopback") + (
                ", g = numpy's float32 sum, a = 0")
        cfg = bench.StrategyBench(model=model, ns=ns, strategies=names, ks=ks,
                                  ps_hosts=ps_hosts, batch_size=batch_size, steps=steps,
                                  runs_dir=runs_dir, working_dir=Path.cwd(), ssh=ssh,
                                  heartbeat_timeout_s=60.0 if rate else 10.0)
        _run_strategies(cfg, hosts, params, source)


def _run_strategies(cfg: StrategyBench, hosts: Inventory, params: Params,
                    source: str) -> None:
    from ringtrain.bench.train import strategies as bench  # noqa: PLC0415 - see _config
    from ringtrain.cli.context import SshOptions, ssh_remote  # noqa: PLC0415 - paramiko
    from ringtrain.launch.reporter import NullReporter  # noqa: PLC0415

    class Notes(NullReporter):
        def note(self, text: str) -> None:
            click.echo(f"bench: {text}", err=True)

    run_dir = bench.run_and_write(hosts, ssh_remote(SshOptions(cfg.ssh)), cfg, params, source,
                                  Notes())
    click.echo((run_dir / "strategies.md").read_text())
    click.echo(f"written: {run_dir}/strategies.json, strategies.md, strategies.png")


@command.command("project", epilog=_EPILOG)
@click.option("--run", "run_dir", required=True, help="A compare/allreduce run (the fit).",
              type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--train", "train_dirs", multiple=True, help="Train runs (measured T_1).",
              type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--fit", "fit_key", default="horovod", show_default=True,
              help="Which fitted transport gives a and g.")
@click.option("--images-per-sec", type=float,
              help="Instead of a measured T_1: this per-worker rate (label it yourself).")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1))
def project_cmd(run_dir: Path, train_dirs: tuple[Path, ...], fit_key: str,
                images_per_sec: float | None, batch_size: int) -> None:
    """Predict Horovod's published 512-GPU scaling efficiency from the fit and a step time."""
    from ringtrain.bench.model import projection_report  # noqa: PLC0415 - see _config

    text = projection_report.render(run_dir, train_dirs, fit_key, images_per_sec, batch_size)
    click.echo(text)
