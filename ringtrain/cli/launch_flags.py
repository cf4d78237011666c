"""``ringtrain launch``'s flags: their declarations, help and the small parsers they use. The
command itself (cli/launch_cmd.py) reads them into LaunchOptions; ``ringtrain.run()`` takes the
same names as keyword arguments (assembly/launch_spec.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ringtrain.cli import launch_entry
from ringtrain.cli.options import (
    elastic_options,
    horovod_tuning_options,
    host_source_options,
    on_bad_host_option,
    placement_options,
    restart_options,
    ring_check_options,
    ssh_options,
)
from ringtrain.spec import Backend, EnvSpec, StragglerAction, Strategy

F = TypeVar("F", bound=Callable[..., Any])

_EPILOG = """\b
Examples:
  ringtrain launch ringtrain/models/digits.py                  all local slots
  ringtrain launch -H localhost:2 ringtrain/models/digits.py --epochs 3
  ringtrain launch --hosts gpu.txt -np 8 train.py --batch-size 64
  ringtrain launch --hosts cluster.yaml --exclude gpu03 --ring-label rack train.py
  ringtrain launch --backend horovodrun --gloo -H localhost:2 train.py
  ringtrain launch --strategy tf-multiworker --hosts gpu.txt mwms_train.py
  ringtrain launch --strategy tf-ps --ps 2 --hosts gpu.txt ps_train.py
  ringtrain launch --srun-args="--cpu-bind=cores --gpus-per-task=1" train.py
                                          inside a Slurm job: srun's own options for the step
  ringtrain launch --dry-run -H localhost:2 train.py   print the plan; run nothing
  ringtrain launch --from runs/20261124-010203-ab12   launch again what that run ran

Everything after SCRIPT is passed to the script. Per-rank logs, the hostfile, plan.json and
result.json go to RUNS_DIR/<run id>/. Exit code: the job's own (a rank's exit code, or
128+N when it was killed by signal N); a fault ringtrain detected: 20 start-up hang, 21 host
lost, 22 one rank silent, 23 stall, 24 Open MPI daemon lost, 25 a straggler left out
(--on-straggler restart-without); ringtrain's own errors use 2-8.
"""


def _env_specs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[EnvSpec, ...]:
    return tuple(EnvSpec.parse(v) for v in values)


def _plain_env_specs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[EnvSpec, ...]:
    return tuple(EnvSpec.parse(v, plain=True) for v in values)


def _rank_set(text: str | None) -> frozenset[int] | None:
    """``0,3-4`` -> {0, 3, 4}; None: every rank."""
    if text is None or text == "all":
        return None
    ranks: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise click.BadParameter(f"{text!r} is not a rank list like 0 or 0,3-4 or all")
        ranks.update(range(int(first), int(last or first) + 1))
    return frozenset(ranks)


def launch_flags(command: F) -> F:
    """The launch command's click declaration, applied to ``command``."""
    decorated: Any = command
    for flag in reversed(_FLAGS):
        decorated = flag(decorated)
    return decorated  # type: ignore[no-any-return]


_FLAGS: tuple[Callable[[Any], Any], ...] = (
    click.command(
        "launch",
        epilog=_EPILOG,
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    ),
    host_source_options(),
    click.option("-np", "--np", "--num-proc", "np", type=int,
                 help="Number of ranks (default: every slot); --num-proc as horovodrun "
                 "spells it."),
    click.option(
        "--backend",
        type=click.Choice([b.value for b in Backend]),
        help="What starts the ranks (default: srun inside a Slurm job, else mpirun).",
    ),
    click.option("--gloo", is_flag=True, help="With --backend horovodrun: Gloo instead of MPI."),
    click.option(
        "--strategy",
        type=click.Choice([s.value for s in Strategy]),
        default=Strategy.HOROVOD.value,
        show_default=True,
        help="horovod: Horovod's ring all-reduce. tf-multiworker: TensorFlow's "
        "MultiWorkerMirroredStrategy; every rank is a worker task and gets its TF_CONFIG. "
        "tf-ps: TensorFlow's ParameterServerStrategy; every slot a worker, plus a chief and --ps "
        "parameter servers; the job ends when the chief's script does.",
    ),
    click.option(
        "--ps",
        type=click.IntRange(min=0),
        default=0,
        help="With --strategy tf-ps: the number of parameter-server tasks (spread over the hosts).",
    ),
    click.option(
        "--ps-hosts",
        type=click.Choice(["shared", "own"]),
        default="shared",
        show_default=True,
        help="With --strategy tf-ps: ps tasks beside the workers, or on the inventory's hosts that "
        "run no worker (-np smaller than the slots), each with a link of its own.",
    ),
    click.option(
        "--tf-port",
        type=click.IntRange(1024, 65000),
        default=23456,
        show_default=True,
        help="With a TF strategy: a host's tasks listen on this port and the next ones.",
    ),
    click.option(
        "--env",
        "env",
        multiple=True,
        callback=_env_specs,
        metavar="NAME[=VALUE]",
        help="Forward NAME to every rank, or set it to VALUE. A secret whatever its name: sent "
        "by a 0600 file on each host, never on a command line or the wire in clear, never "
        "shown. Repeatable; over the config files' env and env_file, name by name.",
    ),
    click.option(
        "--env-plain",
        "env_plain",
        multiple=True,
        callback=_plain_env_specs,
        metavar="NAME[=VALUE]",
        help="As --env, for a value that is no secret (NCCL_DEBUG=INFO): shown in the plan and "
        "passed in the launch command's environment. PATH, LD_LIBRARY_PATH, PYTHONPATH... are "
        "plain with --env too: a rank reads them as it starts.",
    ),
    ssh_options(),
    click.option("--no-probe", is_flag=True, help="Skip the SSH pre-flight probe of every host."),
    ring_check_options("--ring-check"),
    click.option(
        "--gpus",
        "gpu_mode",
        flag_value="required",
        help="Require GPUs (default: required unless no host has an NVIDIA driver).",
    ),
    click.option("--cpu", "gpu_mode", flag_value="ignored", help="CPU job: GPUs do not matter."),
    on_bad_host_option,
    placement_options(),
    click.option(
        "--allow-mixed-versions",
        is_flag=True,
        help="Warn instead of refusing when hosts run different software versions.",
    ),
    click.option("--network-interface", "--network-interfaces", "network_interface",
                  help="Interfaces or CIDRs for MPI traffic, comma-separated (default: chosen); "
                  "--network-interfaces as horovodrun spells it."),
    click.option("--python", help="Python on the hosts (default: this one, same path everywhere)."),
    click.option(
        "-m",
        "--module",
        metavar="MODULE",
        help="Run a module on every rank, as python -m MODULE does; what follows is its arguments.",
    ),
    click.option(
        "--mpi-arg",
        "mpi_args",
        multiple=True,
        metavar="ARG",
        help="Pass ARG to mpirun as it is, before the rank command (repeat for each word, e.g. "
        "--mpi-arg=-mca --mpi-arg=btl_tcp_if_exclude --mpi-arg=docker0,lo). An MCA parameter you "
        "set (-mca NAME VALUE, or OMPI_MCA_NAME in the environment) replaces ringtrain's own "
        "(pml ob1, btl ^openib, the probe's btl/oob_tcp_if_include); --dry-run says which.",
    ),
    click.option(
        "--mpi-args",
        "mpi_args_line",
        metavar='"ARGS"',
        callback=lambda _ctx, _param, value: launch_entry.split_mpi_args(value),
        help='mpirun arguments in one string, as horovodrun takes them: --mpi-args="-mca btl '
        '^openib" (split as a shell would, after any --mpi-arg).',
    ),
    click.option(
        "--srun-args",
        "srun_args",
        multiple=True,
        metavar='"ARGS"',
        callback=lambda _ctx, _param, values: launch_entry.split_srun_args(values),
        help='srun options for the step, split as a shell would, after ringtrain\'s own: '
        '--srun-args="--cpu-bind=cores --gpus-per-task=1" (repeatable). Your --mpi=TYPE replaces '
        "ringtrain's --mpi (SLURM_MPI_TYPE, else pmix). Refused: the options ringtrain sets "
        "(--nodes, --ntasks, --nodelist, --distribution, --export, --label, --output, ...).",
    ),
    click.option(
        "--checkpoint",
        "checkpoint_url",
        metavar="URL",
        help="Where rank 0 commits checkpoints and a restart resumes from: a path, file://, "
        "s3://bucket/prefix or hdfs://... (credentials from AWS_* variables, never the URL).",
    ),
    click.option(
        "--checkpoint-grace",
        type=click.FloatRange(min=0),
        default=60,
        show_default=True,
        help="Seconds a checkpoint storage outage may last: rank 0 retries that long, then "
        "skips that checkpoint with a warning; a second one lost in a row stops the job.",
    ),
    click.option(
        "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True
    ),
    click.option(
        "--trust-group",
        "trust_groups",
        multiple=True,
        metavar="GROUP",
        help="A group whose members may write the runs directory or a directory above it (a "
        "team directory): by default any write access but yours and root's is refused, since "
        "such a member could swap the run directory. Repeatable.",
    ),
    restart_options(),
    elastic_options(),
    click.option(
        "--start-timeout",
        type=click.FloatRange(min=1),
        default=120,
        show_default=True,
        help="Seconds for every rank to start and finish hvd.init().",
    ),
    click.option(
        "--stall-timeout",
        type=click.FloatRange(min=1),
        help="Seconds without training progress (reported by ringtrain.keras's callbacks or "
        "ringtrain.keras.progress) before the job counts as hung. [default: 600, once the "
        "script reports progress]",
    ),
    click.option(
        "--exit-grace",
        type=click.FloatRange(min=1),
        default=120,
        show_default=True,
        help="Seconds the ranks may take to exit after every one returned from the script; "
        "then ringtrain ends them, and the job still counts as a success.",
    ),
    click.option(
        "--heartbeat-timeout",
        type=click.FloatRange(min=2),
        default=10,
        show_default=True,
        help="Seconds of silence after which a host counts as lost.",
    ),
    click.option(
        "--control-hubs",
        type=click.Choice(["auto", "on", "off"]),
        default="auto",
        show_default=True,
        help="Supervise through one process per host that speaks for its ranks (a hub), "
        "instead of one connection per rank to the launcher: at 80,000 ranks the launcher reads "
        "10,000 connections, not 80,000, and one heartbeat per host each second "
        "(docs/SCALE.md). A silent rank is still named as a rank, a lost host as a host. "
        "auto: on from 2,048 ranks.",
    ),
    click.option(
        "--on-straggler",
        type=click.Choice([a.value for a in StragglerAction]),
        help="A rank whose own part of each step (before the all-reduce) stays "
        "--straggler-threshold x the other ranks' median for --straggler-window seconds: name it "
        "(warn), or restart from the last checkpoint without its host (restart-without; needs "
        "--max-restarts). Ranks report step times through ringtrain.keras.callbacks() or "
        "ringtrain.keras.step_time(). [default: warn]",
    ),
    click.option(
        "--straggler-threshold",
        type=click.FloatRange(min=1.05),
        default=1.5,
        show_default=True,
        help="How many times the other ranks' median step time makes a straggler.",
    ),
    click.option(
        "--straggler-window",
        type=click.FloatRange(min=1),
        default=60,
        show_default=True,
        help="Seconds a rank must stay over the threshold before it is named.",
    ),
    horovod_tuning_options(),
    click.option(
        "--console-ranks",
        callback=lambda _c, _p, v: _rank_set(v),
        metavar="RANKS",
        help="Show only these ranks' output on the console, e.g. 0 or 0,3-4 (default: all; "
        "every rank's output is in its log either way).",
    ),
    click.option(
        "--json",
        "json_out",
        is_flag=True,
        help="Print the job's result (result.json) on stdout at the end; the ranks' output "
        "and ringtrain's notes go to stderr.",
    ),
    click.option(
        "--requeue",
        is_flag=True,
        help="Inside a Slurm batch job: after a preemption notice (SIGUSR1, from sbatch "
        "--signal=B:USR1@SECONDS) and rank 0's checkpoint, put the job back in the queue; it "
        "resumes from --checkpoint. `ringtrain slurm submit --requeue` passes it.",
    ),
    click.option(
        "--dry-run",
        is_flag=True,
        help="Write the run dir (hostfile, plan.json), print the plan (env, argv); start nothing.",
    ),
    click.option(
        "--from",
        "from_run",
        metavar="RUN_DIR",
        type=click.Path(path_type=Path),
        help="Launch again exactly what RUN_DIR (runs/<id>) ran: its plan.json records the whole "
        "launch spec. Takes no other launch option but --dry-run.",
    ),
    click.argument("script", required=False),
    click.argument("script_args", nargs=-1, type=click.UNPROCESSED),
)
