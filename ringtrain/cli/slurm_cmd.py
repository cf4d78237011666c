"""``ringtrain slurm``: render and submit sbatch wrapper jobs; a local Slurm cluster for tests."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ringtrain.cli.options import stacked
from ringtrain.schedulers.batch import BatchJob, render_sbatch
from ringtrain.schedulers.calls import submit
from ringtrain.schedulers.jobenv import Scheduler
from ringtrain.sim import slurm as slurm_sim

_EPILOG = """\b
Examples:
  ringtrain slurm render --nodes 4 --gpus-per-node 4 --partition gpu --time 2:00:00 \\
      train.py --epochs 10                   print the sbatch script
  ringtrain slurm submit --nodes 2 --gpus-per-node 8 train.py    write it and sbatch it
  ringtrain slurm render ... --launch-arg=--max-restarts=2 --setup 'module load cuda'
  ringtrain slurm submit --requeue --launch-arg=--checkpoint=file:///shared/ckpt train.py
                     preempted: commit at once, back to the queue, resume from the checkpoint
  ringtrain slurm submit --qos high --constraint 'a100&ib' --mem 200G --exclusive \\
      --sbatch-arg=--mail-type=END --launch-arg=--srun-args=--cpu-bind=cores train.py
                     the job's shape, and srun's own options for the step

Inside the job, `ringtrain launch train.py` (what the script runs) reads the allocation from
SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE and starts one rank per task with srun --mpi=pmix
(SLURM_MPI_TYPE when set; `ringtrain launch --srun-args` adds srun options of yours).
"""


def batch_options(fn: click.decorators.FC) -> click.decorators.FC:
    """Options shared by ``ringtrain slurm`` and ``ringtrain pbs`` render/submit."""
    options = [
        click.option("--nodes", "-N", type=int, default=1, show_default=True),
        click.option("--gpus-per-node", type=int, default=0, show_default=True,
                     help="GPUs per node (0: a CPU job)."),
        click.option("--ntasks-per-node", "tasks", type=int,
                     help="Ranks per node (default: one per GPU, else 1)."),
        click.option("--cpus-per-task", type=int, help="CPU cores per rank."),
        click.option("--time", "time_limit", help="Time limit in the scheduler's syntax."),
        click.option("--account", "-A", help="Account to charge."),
        click.option("--job-name", help="Job name (default: ringtrain-SCRIPT)."),
        click.option("--output", "-o", help="Job output file."),
        click.option("--python", default=sys.executable, show_default=True,
                     help="Python that runs ringtrain on the nodes."),
        click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
                     default=Path.cwd, help="Working directory of the job (default: here)."),
        click.option("--launch-arg", "launch_args", multiple=True, metavar="ARG",
                     help="Pass ARG to `ringtrain launch` (e.g. --launch-arg=--no-probe)."),
        click.option("--setup", multiple=True, metavar="LINE",
                     help="Shell line run before the launch (e.g. 'module load cuda')."),
        click.argument("script"),
        click.argument("script_args", nargs=-1, type=click.UNPROCESSED),
    ]
    return stacked(*options)(fn)


def make_batch_job(opts: dict[str, Any], queue: str | None) -> BatchJob:
    """The BatchJob the shared options describe (script path made absolute)."""
    workdir = Path(opts["workdir"]).absolute()
    script = Path(opts["script"])
    return BatchJob(
        script=str(script if script.is_absolute() else (workdir / script)),
        script_args=tuple(opts["script_args"]),
        nodes=opts["nodes"],
        gpus_per_node=opts["gpus_per_node"],
        tasks_per_node=opts["tasks"],
        cpus_per_task=opts["cpus_per_task"],
        queue=queue,
        time=opts["time_limit"],
        account=opts["account"],
        job_name=opts["job_name"],
        output=opts["output"],
        python=opts["python"],
        working_dir=str(workdir),
        launch_args=tuple(opts["launch_args"]),
        setup=tuple(opts["setup"]),
    )


def write_script(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@click.group("slurm", epilog=_EPILOG)
def command() -> None:
    """Slurm: sbatch wrapper jobs that run `ringtrain launch`, and a local test cluster."""


def preemption_options(fn: click.decorators.FC) -> click.decorators.FC:
    return stacked(
        click.option("--partition", "-p", help="Partition to run in."),
        click.option("--signal-lead", "signal_lead", type=int, default=120, show_default=True,
                     metavar="SECONDS",
                     help="Ask Slurm for SIGUSR1 this long before a preemption or the time "
                     "limit (--signal=B:USR1@SECONDS): rank 0 commits a checkpoint at once and "
                     "the job ends cleanly. 0: no signal."),
        click.option("--requeue", is_flag=True,
                     help="After that commit, put the job back in the queue (scontrol requeue); "
                     "it resumes from the checkpoint. Needs --launch-arg=--checkpoint=URL."),
    )(fn)


def shape_options(fn: click.decorators.FC) -> click.decorators.FC:
    """The batch job's shape beyond nodes and GPUs: Slurm's own words, as #SBATCH lines."""
    return stacked(
        click.option("--qos", help="Quality of service (#SBATCH --qos)."),
        click.option("--constraint", "-C", metavar="FEATURES",
                     help="Node features, with Slurm's &, | and [...]: 'a100&ib'."),
        click.option("--mem", metavar="SIZE",
                     help="Memory per node: MB, or with a unit (64G; 0: all of it)."),
        click.option("--reservation", help="Run in this reservation."),
        click.option("--exclusive", is_flag=True, help="No other job on the nodes."),
        click.option("--sbatch-arg", "sbatch_args", multiple=True, metavar="--NAME[=VALUE]",
                     help="Any other sbatch option, one #SBATCH line each; repeatable: "
                     "--sbatch-arg=--mail-type=END --sbatch-arg=--gres=gpu:a100:4. Those "
                     "written above are refused: use their own option."),
    )(fn)


def slurm_job(opts: dict[str, Any]) -> BatchJob:
    lead = opts.pop("signal_lead")
    requeue = opts.pop("requeue")
    shape = {k: opts.pop(k) for k in ("qos", "constraint", "mem", "reservation", "exclusive")}
    extra = tuple(opts.pop("sbatch_args"))
    job = make_batch_job(opts, opts.pop("partition"))
    return replace(job, signal_lead_s=lead or None, requeue=requeue, sbatch_args=extra,
                   **shape)


@command.command("render", epilog=_EPILOG,
                 context_settings={"allow_interspersed_args": False})
@preemption_options
@shape_options
@batch_options
def render_cmd(**opts: Any) -> None:
    """Print the sbatch script that runs SCRIPT with ringtrain launch."""
    click.echo(render_sbatch(slurm_job(opts)), nl=False)


@command.command("submit", epilog=_EPILOG,
                 context_settings={"allow_interspersed_args": False})
@click.option("--script-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the sbatch script (default: WORKDIR/ringtrain-JOBNAME.sbatch).")
@preemption_options
@shape_options
@batch_options
def submit_cmd(script_out: Path | None, **opts: Any) -> None:
    """Write the sbatch script and submit it; print the job id."""
    job = slurm_job(opts)
    text = render_sbatch(job)
    path = script_out or Path(job.working_dir) / f"{job.name}.sbatch"
    write_script(text, path)
    job_id = submit(Scheduler.SLURM, path)
    click.echo(f"ringtrain: submitted {path} as Slurm job {job_id}", err=True)
    click.echo(job_id)


# --------------------------------------------------------------------------- local cluster

_name = click.option("--name", default="rts", show_default=True, help="Cluster name.")
_state_dir = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                          help="Configs, munge key, logs (default: ./.sim/slurm-NAME).")


@command.group("sim")
def sim_group() -> None:
    """A real Slurm cluster on this machine (munged, slurmctld, N slurmd; needs root)."""


@sim_group.command("up")
@click.option("--nodes", default=4, show_default=True, help="Nodes gpu01..gpuNN.")
@click.option("--gpus", default=4, show_default=True, help="Fake GPUs (gres) per node.")
@click.option("--cpus", default=8, show_default=True, help="CPUs per node.")
@_name
@_state_dir
def sim_up(nodes: int, gpus: int, cpus: int, name: str, state_dir: Path | None) -> None:
    """Start the cluster (a healthy one is left alone) and wait until all nodes are idle."""
    cfg = slurm_sim.SlurmSimConfig(name=name, nodes=nodes, gpus_per_node=gpus,
                                   cpus_per_node=cpus, state_dir=state_dir)
    sim = slurm_sim.slurm_up(cfg)
    click.echo(f"slurm sim {name}: {nodes} nodes {sim.nodes[0]}..{sim.nodes[-1]}, "
               f"{gpus} GPU(s) each; state in {sim.state_dir}")
    click.echo(f"  export SLURM_CONF={sim.slurm_conf}")
    click.echo("  try:  sinfo; sbatch -N2 --ntasks-per-node=2 --wrap 'srun hostname'")
    click.echo("  jobs on these emulated nodes need OMPI_MCA_btl=self,tcp "
               "OMPI_MCA_btl_tcp_if_include=lo (one host)")


@sim_group.command("down")
@_name
@_state_dir
def sim_down(name: str, state_dir: Path | None) -> None:
    """Cancel every job and stop every daemon and job process of the cluster."""
    slurm_sim.slurm_down(slurm_sim.SlurmSimConfig(name=name, state_dir=state_dir))
    click.echo(f"slurm sim {name}: down")


@sim_group.command("status")
@_name
@_state_dir
def sim_status(name: str, state_dir: Path | None) -> None:
    """Daemons and node states, as JSON."""
    sim = slurm_sim.load(slurm_sim.SlurmSimConfig(name=name, state_dir=state_dir))
    if sim is None:
        click.echo(f"slurm sim {name}: down")
        return
    click.echo(json.dumps(slurm_sim.status(sim), indent=2))
