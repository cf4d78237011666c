"""``ringtrain launch --requeue``: after a preemption notice (SIGUSR1, answered below both
doors by launch/lifecycle.py), the job is put back in Slurm's queue (``scontrol requeue``) once
everything is written, and the requeued job resumes from its checkpoint.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping

from ringtrain.errors import JobFailed, UsageError
from ringtrain.launch import lifecycle
from ringtrain.launch.session import Session
from ringtrain.schedulers import calls
from ringtrain.spec import LaunchSpec

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def slurm_job_id(environ: Mapping[str, str]) -> str | None:
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return job if job and job.isdigit() else None


def check_requeue(spec: LaunchSpec, environ: Mapping[str, str]) -> str:
    """``--requeue``: the Slurm job to requeue, or a UsageError that says what is missing."""
    job = slurm_job_id(environ)
    if job is None:
        raise UsageError("--requeue: this launch is not inside a Slurm batch job "
                         "(no SLURM_JOB_ID)",
                         "submit it with `ringtrain slurm submit --requeue ...`, or leave "
                         "--requeue out")
    if spec.checkpoint is None:
        raise UsageError("--requeue: the requeued job starts a new run dir, so it can only "
                         "resume from a checkpoint URL both runs name",
                         "pass --checkpoint URL (e.g. --checkpoint file:///shared/ckpt)")
    return job


def after_preemption(session: Session, note: Callable[[str], None],
                     requeue_job: str | None) -> JobFailed:
    """The preempted job's last words (what to raise): with ``requeue_job``, Slurm is asked to
    requeue it first; it ends this job at once (SIGTERM, ignored: all is written by now)."""
    if requeue_job is None:
        return lifecycle.preempted(session)
    where = session.checkpoint.url
    preemption = session.preemption
    said = preemption.describe() if preemption else "preempted"
    note(f"requeueing Slurm job {requeue_job}: it resumes from {where}")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Slurm's end of this run of the job
    failed = calls.requeue(requeue_job, session.env.environ)
    if failed is None:
        return JobFailed(f"job {said}; requeued as Slurm job {requeue_job}",
                         f"it resumes from {where} when Slurm starts it again", exit_code=143)
    return JobFailed(f"job {said}; scontrol requeue {requeue_job} failed: {failed}",
                     f"requeue it by hand (scontrol requeue {requeue_job}) or submit it again "
                     f"with --checkpoint {where}", exit_code=143)
