"""``ringtrain bench train`` (training throughput; TensorFlow's strategies against the ring and
the cost model) and ``ringtrain bench project`` (the cost model projected to published setups)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ringtrain.bench.units import parse_ints
from ringtrain.cli.bench_common import EPILOG, echo_round, terminable
from ringtrain.errors import UsageError

if TYPE_CHECKING:  # the bench modules need numpy (the [bench] extra): imported when run
    from ringtrain.bench.model.costmodel import Params
    from ringtrain.bench.train.strategies import StrategyBench
    from ringtrain.hostfile import Inventory


@click.command("train", epilog=EPILOG)
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
@click.option("-n", "--workers", default="1,2", show_default=True,
              help="Worker counts. With --strategy, N = 1 runs only TF's PS: one worker per "
              "fan-in the other cells need, from which TF's PS model is built.")
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
    with terminable():
        run_dir = training.run_and_write(cfg, harness.local_target(), runs_dir,
                                         on_round=echo_round)
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
    with contextlib.ExitStack() as stack, terminable():
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


PROJECT_EPILOG = """\b
Examples:
  ringtrain bench project                       public inputs only: table, sources, sensitivity
  ringtrain bench project --json                the same as one JSON document
  ringtrain bench project --plot runs/projection.png
  ringtrain bench project --run runs/bench-<id> --train runs/bench-train-<id>
                                                also the projection from this machine's fit

\b
The projection takes every input from a published source (docs/BENCH.md lists them): one
P100's img/s (TensorFlow's benchmarks), the models' per-layer gradients and FLOPs
(tf.keras.applications), NCCL's latency model and NIC goodput, Horovod's 2017 fusion buffer
and cycle. Gradients become ready from the last layer to the first and are all-reduced under
Horovod's cycle while the backward pass goes on; nothing is fitted to the published figures.
"""


@click.command("project", epilog=PROJECT_EPILOG)
@click.option("--ps", "ps_counts", default="32,64,128,256", show_default=True, metavar="LIST",
              help="Parameter-server counts k to predict on the same hardware (push, then "
              "pull, through k servers with a NIC each).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the tables.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write predicted vs published as a PNG here.")
@click.option("--run", "run_dir", help="Also project from this compare/allreduce run's fit "
              "(this machine's a and g, measured T_1 from --train).",
              type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--train", "train_dirs", multiple=True, help="With --run: train runs (measured "
              "T_1).", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--fit", "fit_key", default="horovod", show_default=True,
              help="With --run: which fitted transport gives a and g.")
@click.option("--images-per-sec", type=float,
              help="With --run, instead of a measured T_1: this per-worker rate (label it "
              "yourself).")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1),
              help="With --images-per-sec: the batch that rate is for.")
def project_cmd(ps_counts: str, as_json: bool, plot_path: Path | None, run_dir: Path | None,
                train_dirs: tuple[Path, ...], fit_key: str, images_per_sec: float | None,
                batch_size: int) -> None:
    """Predict Horovod's published 128- and 512-GPU scaling efficiency from public inputs,
    with the sources, the sensitivity to each input and the parameter-server alternative."""
    from ringtrain.bench.model import gpu_report, projection_report  # noqa: PLC0415 - numpy

    if run_dir is None and (train_dirs or images_per_sec is not None):
        raise UsageError("--train and --images-per-sec go with --run (a measured fit)",
                         "add --run runs/bench-<id>, or drop them for the public projection")
    ks = tuple(parse_ints(ps_counts, "--ps", 1, 4096))
    report = gpu_report.build(ks=ks)
    measured = (projection_report.render(run_dir, train_dirs, fit_key, images_per_sec,
                                         batch_size) if run_dir is not None else None)
    if plot_path is not None:
        from ringtrain.bench.model import projection_plot  # noqa: PLC0415 - matplotlib

        projection_plot.plot(report, plot_path)
    if as_json:
        click.echo(json.dumps({**report.as_dict(), "measured": measured}, indent=1))
        return
    click.echo(gpu_report.render(report))
    if measured is not None:
        click.echo("\n" + measured)
    if plot_path is not None:
        click.echo(f"written: {plot_path}")
