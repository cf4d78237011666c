"""``ringtrain pbs``: render and submit qsub wrapper jobs (PBS Pro / OpenPBS ``select`` syntax)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ringtrain.cli.slurm_cmd import batch_options, make_batch_job, write_script
from ringtrain.schedulers.batch import render_qsub
from ringtrain.schedulers.calls import submit
from ringtrain.schedulers.jobenv import Scheduler

_EPILOG = """\b
Examples:
  ringtrain pbs render --nodes 2 --gpus-per-node 4 --ncpus 32 --queue gpu --time 4:00:00 \\
      train.py --epochs 10                   print the qsub script
  ringtrain pbs submit --nodes 2 --gpus-per-node 4 train.py        write it and qsub it

The script asks for select=N:ncpus=C:ngpus=G:mpiprocs=T; PBS then writes each node T times
into $PBS_NODEFILE, which `ringtrain launch` (what the script runs) reads as T slots per node
and starts the ranks with mpirun over SSH.
"""


@click.group("pbs", epilog=_EPILOG)
def command() -> None:
    """PBS: qsub wrapper jobs that run `ringtrain launch`."""


@command.command("render", epilog=_EPILOG, context_settings={"allow_interspersed_args": False})
@click.option("--queue", "-q", help="Queue to submit to.")
@click.option("--ncpus", type=int, help="CPU cores per node (default: tasks x cpus-per-task).")
@batch_options
def render_cmd(queue: str | None, ncpus: int | None, **opts: Any) -> None:
    """Print the qsub script that runs SCRIPT with ringtrain launch."""
    click.echo(render_qsub(make_batch_job(opts, queue), ncpus), nl=False)


@command.command("submit", epilog=_EPILOG, context_settings={"allow_interspersed_args": False})
@click.option("--queue", "-q", help="Queue to submit to.")
@click.option("--ncpus", type=int, help="CPU cores per node (default: tasks x cpus-per-task).")
@click.option("--script-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the qsub script (default: WORKDIR/JOBNAME.pbs).")
@batch_options
def submit_cmd(queue: str | None, ncpus: int | None, script_out: Path | None, **opts: Any) -> None:
    """Write the qsub script and submit it; print the job id."""
    job = make_batch_job(opts, queue)
    text = render_qsub(job, ncpus)
    path = script_out or Path(job.working_dir) / f"{job.name}.pbs"
    write_script(text, path)
    job_id = submit(Scheduler.PBS, path)
    click.echo(f"ringtrain: submitted {path} as PBS job {job_id}", err=True)
    click.echo(job_id)
