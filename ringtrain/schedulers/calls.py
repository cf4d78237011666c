"""The scheduler's side effects: read the job's allocation, run commands on its nodes, submit.

* ``inventory_from_scheduler(environ)``: the SchedulerJob this process runs in (None outside
  one). Under Slurm it runs ``scontrol show job -d $SLURM_JOB_ID`` once for the per-node GPU
  split (a failure only loses the GPU labels); under PBS it reads ``$PBS_NODEFILE``.
* ``SrunRemote``: the ``Remote`` used inside a Slurm allocation. Pre-flight probes and the
  teardown reaper run on each node as a one-task job step (``srun --overlap -N1 -n1 -w NODE``)
  instead of over SSH: compute nodes often refuse SSH from inside jobs, and the node names Slurm
  uses need not be SSH names at all (emulated nodes share one host).
* ``submit(kind, path)``: ``sbatch --parsable`` or ``qsub``; returns the job id.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringtrain.errors import SchedulerError
from ringtrain.hostfile.model import Host, host_name_problem
from ringtrain.remote import CmdResult, HostCommand, HostResults, fan_out
from ringtrain.schedulers.jobenv import (
    Scheduler,
    SchedulerJob,
    detect_scheduler,
    missing_pbs_nodefile,
    pbs_job,
    slurm_job,
)

log = logging.getLogger(__name__)

_TASK_NOTICE_RE = re.compile(r"^\S+: tasks? [0-9,-]+: ")

SCONTROL_TIMEOUT_S = 15.0
SUBMIT_TIMEOUT_S = 60.0


def inventory_from_scheduler(environ: Mapping[str, str]) -> SchedulerJob | None:
    """The allocation of the Slurm or PBS job this process runs in; None outside any."""
    kind = detect_scheduler(environ)
    if kind is Scheduler.SLURM:
        job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
        return slurm_job(environ, scontrol_job_detail(job_id, environ),
                         scontrol_nodes(environ))
    if kind is Scheduler.PBS:
        path = environ.get("PBS_NODEFILE")
        try:
            text = Path(path).read_text() if path else None
        except OSError:
            text = None
        if text is None:
            raise missing_pbs_nodefile(environ)
        return pbs_job(environ, text)
    return None


def scontrol_job_detail(job_id: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``scontrol show job -d JOB`` output, or None when it cannot be had (logged)."""
    if not job_id.isdigit() and not job_id.replace("_", "").isdigit():
        return None
    return _scontrol(("scontrol", "show", "job", "-d", job_id), environ,
                     "GPU counts from the environment instead")


def requeue(job_id: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``scontrol requeue JOB`` (the job goes back to pending, ending its current run): None
    when Slurm took it, else what went wrong."""
    if not job_id.isdigit():
        return f"{job_id!r} is not a Slurm job id"
    try:
        done = subprocess.run(("scontrol", "requeue", job_id), capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT_S, check=False,
                              env=None if environ is None else dict(environ))
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return None if done.returncode == 0 else (done.stderr.strip() or f"rc {done.returncode}")


def _scontrol(argv: Sequence[str], environ: Mapping[str, str] | None, fallback: str
              ) -> str | None:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_S,
            check=False,
            env=None if environ is None else dict(environ),
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("%s failed (%s); %s", " ".join(argv[:3]), err, fallback)
        return None
    if done.returncode != 0:
        log.info("%s failed: %s; %s", " ".join(argv[:3]), done.stderr.strip(), fallback)
        return None
    return done.stdout


def scontrol_nodes(environ: Mapping[str, str]) -> str | None:
    """``scontrol -o show node NODELIST`` for the job's nodes (their NodeAddr), or None when it
    cannot be had (logged: the nodes are then reached by their names)."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    if not nodelist or nodelist.startswith("-"):
        return None
    return _scontrol(("scontrol", "-o", "show", "node", nodelist), environ,
                    "TensorFlow tasks reach the nodes by their names")


class SrunRemote:
    """Runs argv on allocation nodes as one-task job steps, all nodes at once.

    ``--overlap`` lets the step share CPUs and GPUs with a running step (the teardown reaper
    runs while ranks may still be alive); the step gets the job's GRES on that node, so
    ``nvidia-smi`` sees the GPUs the ranks will see."""

    def __init__(self, environ: Mapping[str, str] | None = None, concurrency: int = 64) -> None:
        self.env = dict(environ) if environ is not None else None
        self.concurrency = concurrency

    def step_argv(self, node: str, argv: Sequence[str], timeout: float) -> list[str]:
        problem = host_name_problem(node)
        if problem is not None:
            raise SchedulerError(problem, "Slurm node names are plain host names")
        limit = max(1, int(timeout // 60) + 1)  # whole minutes; our own timeout cuts earlier
        return [
            "srun",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={node}",
            "--quiet",
            "--export=ALL",
            f"--time={limit}",
            "--",
            *argv,
        ]

    def run(
        self, hosts: Sequence[Host], argv: Sequence[str], timeout: float
    ) -> HostResults:
        return self.run_each([(h, argv) for h in hosts], timeout)

    def run_each(
        self, commands: Sequence[HostCommand], timeout: float
    ) -> HostResults:
        argv_of = {h.name: argv for h, argv in commands}
        return fan_out(
            [h for h, _ in commands],
            lambda h: self.run_one(h.name, argv_of[h.name], timeout),
            self.concurrency,
        )

    def run_with_input(
        self, hosts: Sequence[Host], argv: Sequence[str], data: bytes, timeout: float
    ) -> HostResults:
        """``argv`` on every node with ``data`` on its stdin (srun hands its stdin to the
        step's one task), never in the step's command line."""
        return fan_out(hosts, lambda h: self.run_one(h.name, argv, timeout, data),
                       self.concurrency)

    def run_one(self, node: str, argv: Sequence[str], timeout: float,
                data: bytes | None = None) -> CmdResult:
        start = time.monotonic()
        try:
            done = subprocess.run(
                self.step_argv(node, argv, timeout),
                capture_output=True,
                timeout=timeout,
                env=self.env,
                check=False,
                input=data,
                stdin=subprocess.DEVNULL if data is None else None,
            )
        except subprocess.TimeoutExpired:
            return CmdResult(
                node,
                None,
                "",
                "",
                f"srun step timed out after {timeout:g} s",
                time.monotonic() - start,
            )
        except OSError as err:
            return CmdResult(
                node, None, "", "", f"cannot run srun: {err}", time.monotonic() - start
            )
        out = done.stdout.decode(errors="replace")
        err_text = done.stderr.decode(errors="replace")
        error = srun_failure(err_text) if done.returncode != 0 else None
        return CmdResult(node, done.returncode, out, err_text, error, time.monotonic() - start)


def srun_failure(stderr: str) -> str | None:
    """srun's own error (no step could run), as opposed to its notice that a task exited."""
    for line in stderr.splitlines():
        rest = line.strip().removeprefix("srun: error: ")
        if rest == line.strip() or _TASK_NOTICE_RE.match(rest):
            continue
        return f"srun: {rest}"
    return None


def remote_for(job: SchedulerJob | None,
               environ: Mapping[str, str] | None = None) -> SrunRemote | None:
    """The Remote to use inside ``job`` (srun steps under Slurm, started with ``environ``,
    this process's when None: srun ships it to the node); None means SSH."""
    if job is not None and job.scheduler is Scheduler.SLURM:
        return SrunRemote(environ)
    return None


def submit(kind: Scheduler, script: Path, environ: Mapping[str, str] | None = None) -> str:
    """Submit ``script`` with sbatch or qsub; the job id the scheduler answered."""
    tool = "sbatch" if kind is Scheduler.SLURM else "qsub"
    argv = ["sbatch", "--parsable", str(script)] if tool == "sbatch" else ["qsub", str(script)]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=SUBMIT_TIMEOUT_S,
            check=False,
            env=None if environ is None else dict(environ),
        )
    except FileNotFoundError as err:
        raise SchedulerError(
            f"{tool} not found on PATH",
            f"run this on a {kind.value} login node, or submit {script} there by hand",
        ) from err
    except subprocess.TimeoutExpired as err:
        raise SchedulerError(
            f"{tool} did not answer in {SUBMIT_TIMEOUT_S:g} s",
            "check the scheduler (sinfo / qstat -B) and retry",
        ) from err
    if done.returncode != 0:
        why = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise SchedulerError(
            f"{tool} refused {script}: {why}",
            "fix the option it names (partition, time, account) and retry",
        )
    job_id = done.stdout.strip().splitlines()[-1].split(";")[0].strip() if done.stdout else ""
    if not job_id:
        raise SchedulerError(f"{tool} printed no job id", f"check the queue for {script}")
    return job_id
