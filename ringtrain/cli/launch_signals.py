"""The signals ``ringtrain launch`` answers while a job runs.

* SIGINT, SIGTERM, SIGHUP: stop the job on every host (result.json written), no restart.
* SIGUSR1 (``sbatch --signal=B:USR1@<lead>``, rendered by ``ringtrain slurm render``): a
  preemption notice. Rank 0 commits a checkpoint at its next batch end, then the job ends; with
  ``--requeue`` the job is put back in Slurm's queue (``scontrol requeue``) once everything is
  written, and the requeued job resumes from that checkpoint.

A handler runs on the main thread between two bytecodes, possibly while that thread holds the
view's or the control server's lock: taking them there would deadlock, so each handler starts a
thread and returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

from ringtrain.errors import JobFailed, UsageError
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


@contextmanager
def answering(session: Session, note: Callable[[str], None]) -> Iterator[None]:
    """Within: the stop signals stop the job; SIGUSR1 commits, then stops it."""

    def stop(signum: int) -> None:
        try:
            note(f"{signal.Signals(signum).name}: stopping the job on every host")
        finally:  # whatever the view does, the job stops
            session.stop(signum)

    def preempt(signum: int) -> None:
        name = signal.Signals(signum).name
        try:
            note(f"{name}: preemption notice: rank 0 commits a checkpoint now, then the job "
                 "ends")
        finally:
            note(session.preempt(name).describe())

    def handler(act: Callable[[int], None]) -> Callable[[int, FrameType | None], None]:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            threading.Thread(target=act, args=(signum,), name="ringtrain-signal",
                             daemon=True).start()
        return on_signal

    old = {s: signal.signal(s, handler(stop)) for s in STOPS}
    old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, handler(preempt))
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def after_preemption(session: Session, note: Callable[[str], None],
                     requeue_job: str | None) -> JobFailed:
    """The preempted job's last words (what to raise): with ``requeue_job``, Slurm is asked to
    requeue it first; it ends this job at once (SIGTERM, ignored: all is written by now)."""
    where = session.checkpoint.url
    preemption = session.preemption
    said = preemption.describe() if preemption else "preempted"
    if requeue_job is None:
        return JobFailed(f"job {said}", f"submit it again with --checkpoint {where}: it "
                         "resumes from the last committed checkpoint", exit_code=143)
    note(f"requeueing Slurm job {requeue_job}: it resumes from {where}")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Slurm's end of this run of the job
    failed = calls.requeue(requeue_job, session.env.environ)
    if failed is None:
        return JobFailed(f"job {said}; requeued as Slurm job {requeue_job}",
                         f"it resumes from {where} when Slurm starts it again", exit_code=143)
    return JobFailed(f"job {said}; scontrol requeue {requeue_job} failed: {failed}",
                     f"requeue it by hand (scontrol requeue {requeue_job}) or submit it again "
                     f"with --checkpoint {where}", exit_code=143)
