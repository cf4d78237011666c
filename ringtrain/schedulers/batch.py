"""Batch scripts that run ``ringtrain launch`` under Slurm (sbatch) or PBS (qsub). Pure.

The script asks the scheduler for N nodes with G GPUs and T tasks (ranks) each, then runs
``python -m ringtrain launch SCRIPT ARGS`` once, on the job's first node: ringtrain reads the
allocation from the job environment and starts the ranks (srun under Slurm, mpirun under PBS).
``exec`` makes ringtrain the job's main process, so ``scancel``/``qdel`` reach it directly and it
stops the ranks on every node.

Every value that lands in a directive is checked against a narrow grammar (a newline in a
partition name would add a directive of its own); words of the command line are shell-quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from ringtrain.errors import UsageError
from ringtrain.slurm_options import check_sbatch_arg

_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}\Z")
_LIST_RE = re.compile(r"^[A-Za-z0-9_.@-]+(?:,[A-Za-z0-9_.@-]+)*\Z")
_DIRECTIVE_PATH_RE = re.compile(r"^[A-Za-z0-9_./%+@:-]+\Z")
_SLURM_TIME_RE = re.compile(
    r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
    r"|UNLIMITED|INFINITE)$"
)
_PBS_TIME_RE = re.compile(r"^\d+(?::\d{1,2}){0,2}\Z")
_MEM_RE = re.compile(r"^\d{1,12}[KMGT]?\Z")  # sbatch --mem: MB, or with a unit (0: all)
_FEATURES_RE = re.compile(r"^[A-Za-z0-9_.,:&|*!\[\]()-]{1,512}\Z")  # --constraint a100&ib
# each sbatch option ringtrain slurm writes itself -> the option of ours that sets it
SBATCH_OWNED = {
    "job-name": "--job-name", "nodes": "--nodes", "ntasks-per-node": "--ntasks-per-node",
    "ntasks": "--nodes and --ntasks-per-node", "gpus-per-node": "--gpus-per-node",
    "cpus-per-task": "--cpus-per-task", "partition": "--partition", "time": "--time",
    "account": "--account", "chdir": "--workdir", "output": "--output",
    "signal": "--signal-lead", "requeue": "--requeue", "open-mode": "--requeue",
    "qos": "--qos", "constraint": "--constraint", "mem": "--mem",
    "reservation": "--reservation", "exclusive": "--exclusive",
    "wrap": "SCRIPT (the job runs ringtrain launch SCRIPT)",
}
MAX_COUNT = 100_000


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One ``ringtrain launch`` as a batch job. ``queue`` is the Slurm partition or PBS queue;
    ``time`` the limit in the scheduler's own syntax; ``setup`` shell lines run before the launch
    (``module load ...``); ``launch_args`` options for ``ringtrain launch`` itself."""

    script: str
    script_args: tuple[str, ...] = ()
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    queue: str | None = None
    time: str | None = None
    account: str | None = None
    job_name: str | None = None
    output: str | None = None
    python: str = "python3"
    working_dir: str = "."
    launch_args: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    # Slurm: SIGUSR1 this many seconds before the end (preemption or time limit): rank 0
    # commits a checkpoint at once; None: no --signal. requeue: the job goes back to the queue
    # after it and resumes from that checkpoint (ringtrain launch --requeue)
    signal_lead_s: int | None = 120
    requeue: bool = False
    # Slurm: the batch job's shape beyond the nodes: --qos, --constraint (node features, e.g.
    # a100&ib), --mem (per node, e.g. 64G), --reservation, --exclusive; and any other sbatch
    # option (--sbatch-arg), one #SBATCH line each (slurm_options.check_sbatch_arg)
    qos: str | None = None
    constraint: str | None = None
    mem: str | None = None
    reservation: str | None = None
    exclusive: bool = False
    sbatch_args: tuple[str, ...] = ()

    @property
    def ntasks_per_node(self) -> int:
        """Ranks per node: as asked, else one per GPU, else one."""
        return self.tasks_per_node or self.gpus_per_node or 1

    @property
    def name(self) -> str:
        return self.job_name or "ringtrain-" + (
            re.sub(r"[^A-Za-z0-9_.+-]", "_", PurePosixPath(self.script).stem)[:40] or "job"
        )


def render_sbatch(job: BatchJob) -> str:
    """The sbatch script for ``job``."""
    _check_common(job)
    _check(job.time, _SLURM_TIME_RE, "--time", "a Slurm time such as 30, 4:00:00 or 1-12:00:00")
    _check(job.qos, _NAME_RE, "--qos", "a QOS name such as normal or high")
    _check(job.reservation, _LIST_RE, "--reservation", "a reservation name such as maint")
    _check(job.constraint, _FEATURES_RE, "--constraint",
           "node features with Slurm's operators and no blanks, such as a100&ib or [r1|r2]")
    _check(job.mem, _MEM_RE, "--mem", "the memory per node in MB, or with a unit: 64G")
    extra = [check_sbatch_arg(arg, SBATCH_OWNED) for arg in job.sbatch_args]
    if job.signal_lead_s is not None and not 1 <= job.signal_lead_s <= 65535:
        raise UsageError(f"--signal-lead {job.signal_lead_s} is out of range",
                         "pass the seconds before the end Slurm should warn at (e.g. 120)")
    if job.requeue and job.signal_lead_s is None:
        raise UsageError("--requeue needs the preemption signal",
                         "leave --signal-lead at its default, or pass --signal-lead SECONDS")
    lines = ["#!/bin/bash", *_sbatch_directives(job), *(f"#SBATCH {arg}" for arg in extra)]
    lines += [
        "# Rendered by `ringtrain slurm render`. ringtrain launch reads the allocation from",
        "# SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE and starts one rank per task with",
        "# srun --mpi=pmix; scancel stops every rank.",
    ]
    if job.signal_lead_s is not None:
        lines += [
            f"# SIGUSR1 {job.signal_lead_s} s before the end: rank 0 commits a checkpoint at "
            "once and the job ends" + (", then goes back to the queue and resumes from it."
                                       if job.requeue else "."),
        ]
    if job.requeue:
        job = replace(job, launch_args=("--requeue", *job.launch_args))
    return "\n".join(lines + _body(job, cd=False)) + "\n"


def _sbatch_directives(job: BatchJob) -> list[str]:
    out = [
        f"--job-name={job.name}",
        f"--nodes={job.nodes}",
        f"--ntasks-per-node={job.ntasks_per_node}",
    ]
    if job.gpus_per_node:
        out.append(f"--gpus-per-node={job.gpus_per_node}")
    if job.cpus_per_task:
        out.append(f"--cpus-per-task={job.cpus_per_task}")
    if job.queue:
        out.append(f"--partition={job.queue}")
    if job.time:
        out.append(f"--time={job.time}")
    if job.account:
        out.append(f"--account={job.account}")
    out += [f"--{name}={value}" for name, value in (
        ("qos", job.qos), ("constraint", job.constraint), ("mem", job.mem),
        ("reservation", job.reservation)) if value]
    if job.exclusive:
        out.append("--exclusive")
    out.append(f"--chdir={_directive_path(job.working_dir, 'working directory')}")
    out.append(f"--output={job.output or '%x-%j.out'}")
    if job.signal_lead_s is not None:  # B: to the batch shell, which exec'd ringtrain launch
        out.append(f"--signal=B:USR1@{job.signal_lead_s}")
    if job.requeue:  # and each run's output after the last one's, not over it
        out += ["--requeue", "--open-mode=append"]
    return [f"#SBATCH {d}" for d in out]


def render_qsub(job: BatchJob, ncpus: int | None = None) -> str:
    """The qsub script (PBS Pro / OpenPBS ``select`` syntax) for ``job``.

    ``ncpus`` per chunk defaults to ``tasks x cpus_per_task``; ``mpiprocs`` (the lines per node
    in ``$PBS_NODEFILE``) is the tasks per node, which ringtrain reads back as slots."""
    _check_common(job)
    _check(job.time, _PBS_TIME_RE, "--time", "a PBS walltime such as 30:00 or 4:00:00")
    if not job.name[0].isalpha():
        raise UsageError(
            f"PBS job name {job.name!r} must start with a letter", "pass --job-name NAME"
        )
    tasks = job.ntasks_per_node
    cpus = ncpus or tasks * (job.cpus_per_task or 1)
    _check_count(cpus, "--ncpus")
    chunk = f"select={job.nodes}:ncpus={cpus}"
    if job.gpus_per_node:
        chunk += f":ngpus={job.gpus_per_node}"
    chunk += f":mpiprocs={tasks}"
    lines = ["#!/bin/bash", f"#PBS -N {job.name}", f"#PBS -l {chunk}", "#PBS -l place=scatter"]
    if job.time:
        lines.append(f"#PBS -l walltime={job.time}")
    if job.queue:
        lines.append(f"#PBS -q {job.queue}")
    if job.account:
        lines.append(f"#PBS -A {job.account}")
    lines.append("#PBS -j oe")
    if job.output:
        lines.append(f"#PBS -o {_directive_path(job.output, '--output')}")
    lines += [
        "# Rendered by `ringtrain pbs render`. ringtrain launch reads the allocation from",
        "# $PBS_NODEFILE (one line per MPI process) and starts the ranks with mpirun over SSH;",
        "# qdel stops every rank.",
    ]
    return "\n".join(lines + _body(job, cd=True)) + "\n"


def _body(job: BatchJob, *, cd: bool) -> list[str]:
    lines = ["set -eo pipefail"]
    if cd:
        lines.append(f"cd {shlex.quote(job.working_dir)}")
    lines += list(job.setup)
    argv = [job.python, "-m", "ringtrain", "launch", *job.launch_args, job.script]
    lines.append("exec " + shlex.join([*argv, *job.script_args]))
    return lines


def _check_common(job: BatchJob) -> None:
    _check_count(job.nodes, "--nodes")
    if job.gpus_per_node < 0 or job.gpus_per_node > MAX_COUNT:
        raise UsageError(
            f"--gpus-per-node {job.gpus_per_node} is out of range",
            "pass 0 (a CPU job) or the GPUs each node should have",
        )
    _check_count(job.ntasks_per_node, "--ntasks-per-node")
    if job.cpus_per_task is not None:
        _check_count(job.cpus_per_task, "--cpus-per-task")
    _check(job.job_name, _NAME_RE, "--job-name", "letters, digits and ._+- (at most 64)")
    _check(job.queue, _LIST_RE, "--partition/--queue", "a name such as gpu (or gpu,debug)")
    _check(job.account, _LIST_RE, "--account", "an account name of letters, digits and ._@-")
    if job.output is not None:
        _directive_path(job.output, "--output")
    for line in job.setup:
        if "\n" in line or "\r" in line or not line.isprintable():
            raise UsageError(
                f"--setup {line!r} is not one printable line", "pass one --setup per shell line"
            )
    if not job.working_dir.startswith("/"):
        raise UsageError(
            f"working directory {job.working_dir!r} is not absolute", "pass an absolute path"
        )


def _check_count(value: int, what: str) -> None:
    if not 1 <= value <= MAX_COUNT:
        raise UsageError(
            f"{what} {value} is out of range", f"pass {what} between 1 and {MAX_COUNT}"
        )


def _check(value: str | None, regex: re.Pattern[str], what: str, example: str) -> None:
    if value is not None and not regex.match(value):
        raise UsageError(f"{what} {value!r} is not valid here", f"pass {example}")


def _directive_path(path: str, what: str) -> str:
    if not _DIRECTIVE_PATH_RE.match(path):
        raise UsageError(
            f"{what} {path!r} has spaces or shell characters, which a #SBATCH/#PBS line cannot "
            "carry",
            f"use a {what} path of letters, digits and ./_-%+@:",
        )
    return path
