"""``ringtrain launch``: inventory -> allocation -> plan -> run, with the plan printable as is."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import click

from ringtrain.errors import JobFailed, UsageError
from ringtrain.hostfile import Host, Inventory, allocate, resolve_hosts
from ringtrain.launch import run
from ringtrain.launch.plan import LaunchPlan, PlanInputs, make_plan
from ringtrain.request import Backend, EnvSpec, LaunchRequest

_EPILOG = """\b
Examples:
  ringtrain launch ringtrain/models/digits.py                  all local slots
  ringtrain launch -H localhost:2 ringtrain/models/digits.py --epochs 3
  ringtrain launch --hosts gpu.txt -np 8 train.py --batch-size 64
  ringtrain launch --backend horovodrun --gloo -H localhost:2 train.py
  ringtrain launch --dry-run -H localhost:2 train.py   print the plan; run nothing

Everything after SCRIPT is passed to the script. Per-rank logs, the hostfile, plan.json and
result.json go to RUNS_DIR/<run id>/. Exit code: the job's own (a rank's exit code, or
128+N when it was killed by signal N); ringtrain's own errors use 2-8 (see `ringtrain --help`).
"""


def _env_specs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[EnvSpec, ...]:
    return tuple(EnvSpec.parse(v) for v in values)


@click.command(
    "launch",
    epilog=_EPILOG,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
@click.option(
    "--hosts", "hosts_file", metavar="SOURCE", help="Inventory file (hostfile, YAML, TOML, ...)."
)
@click.option("-H", "host_spec", metavar="h1:N,h2:N", help="Hosts inline, horovodrun style.")
@click.option("--hosts-format", help="Force the inventory format instead of detecting it.")
@click.option("-np", "--np", "np", type=int, help="Number of ranks (default: every slot).")
@click.option(
    "--backend",
    type=click.Choice([b.value for b in Backend]),
    default=Backend.MPIRUN.value,
    show_default=True,
    help="What starts the ranks.",
)
@click.option("--gloo", is_flag=True, help="With --backend horovodrun: Gloo instead of MPI.")
@click.option(
    "--env",
    "env",
    multiple=True,
    callback=_env_specs,
    metavar="NAME[=VALUE]",
    help="Forward NAME to every rank, or set it to VALUE. Repeatable.",
)
@click.option("--ssh-config", type=click.Path(path_type=Path), help="ssh_config for remote hosts.")
@click.option("--network-interface", help="Interface or CIDR for MPI traffic (default: chosen).")
@click.option("--python", help="Python on the hosts (default: this one, same path everywhere).")
@click.option(
    "--checkpoint",
    "checkpoint_url",
    metavar="URL",
    help="Where rank 0 commits checkpoints and a restart resumes from: a path, file://, "
    "s3://bucket/prefix or hdfs://... (credentials from AWS_* variables, never the URL).",
)
@click.option(
    "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Write the run dir (hostfile, plan.json), print the plan (env, argv); start nothing.",
)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def command(
    hosts_file: str | None,
    host_spec: str | None,
    hosts_format: str | None,
    np: int | None,
    backend: str,
    gloo: bool,
    env: tuple[EnvSpec, ...],
    ssh_config: Path | None,
    network_interface: str | None,
    python: str | None,
    checkpoint_url: str | None,
    runs_dir: Path,
    dry_run: bool,
    script: str,
    script_args: tuple[str, ...],
) -> None:
    """Train SCRIPT on every rank with Horovod: resolve hosts, plan, run and supervise."""
    request = LaunchRequest(
        script=script,
        script_args=script_args,
        hosts_file=hosts_file,
        host_spec=host_spec,
        hosts_format=hosts_format,
        np=np,
        backend=Backend(backend),
        gloo=gloo,
        env=env,
        runs_dir=runs_dir,
        working_dir=Path.cwd(),
        ssh_config=ssh_config,
        network_interface=network_interface,
        python=python,
        checkpoint_url=checkpoint_url,
        dry_run=dry_run,
    )
    if not Path(script).is_file():
        raise UsageError(
            f"script {script!r} not found", "give the path of a Python training script"
        )
    inventory = _inventory(request)
    alloc = allocate(inventory, request.np)
    inputs = PlanInputs(
        run_id=_new_run_id(),
        environ=dict(os.environ),
        is_root=os.geteuid() == 0,
        python=sys.executable,
    )
    plan = make_plan(request, alloc, inputs)
    if request.dry_run:
        run.prepare(plan)  # the hostfile the argv names exists, so the argv runs as printed
        click.echo(plan.describe())
        return
    _run(plan)


def _inventory(request: LaunchRequest) -> Inventory:
    inventory = resolve_hosts(request.hosts_file, request.host_spec, request.hosts_format)
    if inventory is not None:
        return inventory
    gpus = run.count_local_gpus()
    slots = gpus or os.cpu_count() or 1
    what = f"{gpus} GPUs" if gpus else f"no GPUs, {slots} CPU cores"
    click.echo(
        f"ringtrain: no --hosts given; using local slots (localhost:{slots}, {what})", err=True
    )
    return Inventory(hosts=(Host("localhost", slots),), source="local slots", format="local")


def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _run(plan: LaunchPlan) -> None:
    click.echo(
        f"ringtrain: run {plan.run_id}: {plan.allocation.np} ranks on "
        f"{len(plan.allocation.hosts)} host(s); logs in {plan.run_dir}",
        err=True,
    )
    click.echo(f"ringtrain: {plan.display_argv}", err=True)
    job = run.start(plan, _print_line)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        click.echo(f"\nringtrain: {signal.Signals(signum).name}: stopping the job", err=True)
        job.request_stop(signum=signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = job.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if result.state is run.JobState.SUCCEEDED:
        click.echo(
            f"ringtrain: job succeeded in {result.duration_s:.1f} s; logs in {result.run_dir}",
            err=True,
        )
        return
    raise JobFailed(_failure_message(result), _failure_hint(result), exit_code=result.exit_code)


def _print_line(line: run.OutputLine) -> None:
    if line.rank is None:
        click.echo(line.text)
    else:
        click.echo(f"[{line.rank}] {line.text}", err=line.stream == "stderr")


def _failure_message(result: run.JobResult) -> str:
    if result.state is run.JobState.INTERRUPTED:
        return f"job interrupted after {result.duration_s:.1f} s and stopped"
    who = "the job"
    if result.failed_rank is not None:
        who = f"rank {result.failed_rank}" + (
            f" on {result.failed_host}" if result.failed_host else ""
        )
    how = f"signal {result.signal_name}" if result.signal_name else f"exit code {result.exit_code}"
    lines = [f"{who} failed ({how}) after {result.duration_s:.1f} s"]
    if result.log_tail:
        lines.append(f"last lines of rank {result.failed_rank}'s log:")
        lines += [f"    {t}" for t in result.log_tail[-10:]]
    return "\n".join(lines)


def _failure_hint(result: run.JobResult) -> str:
    if result.failed_rank is not None:
        return f"see {result.run_dir}/rank.{result.failed_rank}.log for the full log"
    return f"see the logs in {result.run_dir}"
