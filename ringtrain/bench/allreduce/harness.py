"""Start benchmark ranks with mpirun and collect their results, round by round.

A *target* says where ranks run: local slots on this machine, or simulated hosts (one rank per
host, reached with the sim cluster's ssh config and MCA settings). A *job* is one mpirun of a
rank program (``ring_runner`` or ``ps_runner``) whose rank 0 prints ``RESULT {json}`` lines.
A *round* is one job bracketed by quick ceiling probes (memcpy, reduction, load) and watched by
a CPU monitor (monitor.py): when the ceilings drift by more than the tolerance, or processes
that are not the round's own used more than ``foreign_max`` of the machine meanwhile (this
machine is shared), the round is rejected and run again, up to ``attempts`` times; every
attempt is logged.

Argv lists only; the job runs in its own process group, killed as a group on timeout.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ringtrain.bench.allreduce import ceilings
from ringtrain.bench.monitor import CpuMonitor
from ringtrain.errors import JobFailed, LaunchError

log = logging.getLogger(__name__)

# Open MPI's tuned all-reduce, algorithm 4: the ring (reduce-scatter + all-gather).
MPI_RING = ("-mca", "coll_tuned_use_dynamic_rules", "1", "-mca", "coll_tuned_allreduce_algorithm",
            "4")
FORWARD = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV")


@dataclass(frozen=True, slots=True)
class Target:
    """Where ranks run. ``addresses`` (sim) are used one rank per address, in order."""

    name: str
    addresses: tuple[str, ...] = ()
    mca: tuple[str, ...] = ()
    gloo_iface: str = "lo"
    launcher_address: str = "127.0.0.1"  # where ranks reach this process (Gloo rendezvous)
    link_bps: float | None = None  # shaped link rate in bytes/s, None when unshaped
    netns_paths: tuple[str, ...] = ()  # the sim hosts' namespaces (their CPU is ours)
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def remote(self) -> bool:
        return bool(self.addresses)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hosts": list(self.addresses), "link_Bps": self.link_bps,
                "cores": self.cores, "gloo_iface": self.gloo_iface}


def local_target() -> Target:
    return Target(name="local")


@dataclass(frozen=True, slots=True)
class Job:
    """One mpirun: ``np`` ranks of ``python -m mpi4py -m <module> <args>``; ``hosts`` are indices
    into the target's addresses, one per rank (remote targets only)."""

    module: str
    args: tuple[str, ...]
    np: int
    env: tuple[tuple[str, str], ...] = ()
    hosts: tuple[int, ...] = ()
    timeout: float = 600.0
    mpi_ring: bool = True
    gloo: bool = False  # serve Horovod's Gloo rendezvous for the ranks (gloo_rdzv)
    bind: str = "none"  # mpirun -bind-to (target_ab.py tries "core")


def mpirun_argv(target: Target, job: Job, python: str = sys.executable) -> list[str]:
    argv = ["mpirun"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += ["-np", str(job.np), "-bind-to", job.bind, "-map-by", "slot", "-mca", "pml", "ob1"]
    if target.remote:
        if len(job.hosts) != job.np:
            raise LaunchError(f"{job.np} ranks but {len(job.hosts)} hosts placed",
                              "place one rank per simulated host")
        hosts = ",".join(f"{target.addresses[i]}:1" for i in job.hosts)
        # every simulated host shares this machine's cores: spinning ranks must yield
        argv += ["-H", hosts, *target.mca, "-mca", "btl", "tcp,self",
                 "-mca", "mpi_yield_when_idle", "1"]
    else:
        argv += ["-mca", "btl", "self,vader,tcp", "-mca", "btl_tcp_if_include", "lo"]
        if job.np > target.cores:
            argv.append("--oversubscribe")
    if job.mpi_ring:
        argv += MPI_RING
    names = [n for n in FORWARD if n in os.environ] + [name for name, _ in job.env]
    for name in dict.fromkeys(names):
        argv += ["-x", name]
    argv += [python, "-m", "mpi4py", "-m", job.module, *job.args]
    return argv


def parse_results(output: str) -> list[dict[str, Any]]:
    rows = []
    for line in output.splitlines():
        _, sep, payload = line.partition("RESULT ")
        if sep:
            rows.append(json.loads(payload))
    return rows


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_job(target: Target, job: Job) -> list[dict[str, Any]]:
    """Run one job to completion and return its RESULT rows (JobFailed with the output's tail)."""
    return run_job_monitored(target, job)[0]


def run_job_monitored(target: Target, job: Job) -> tuple[list[dict[str, Any]], float]:
    """``run_job`` plus the fraction of the machine foreign processes used meanwhile."""
    if not job.gloo:
        return _run_job(target, job)
    from ringtrain.bench.allreduce.gloo_rdzv import rendezvous

    per_host = 1 if target.remote else job.np
    with rendezvous(target.launcher_address, job.np, per_host, target.gloo_iface) as env:
        return _run_job(target, replace(job, env=job.env + env_tuple(env)))


def _run_job(target: Target, job: Job) -> tuple[list[dict[str, Any]], float]:
    argv = mpirun_argv(target, job)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **dict(job.env)}
    log.debug("mpirun: %s", " ".join(argv))
    with CpuMonitor([Path(p) for p in target.netns_paths]) as mon:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        mon.watch(proc.pid)
        out = _wait(proc, job)
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-15:])
        raise JobFailed(f"benchmark job {job.module} failed (exit {proc.returncode}):\n{tail}",
                        "run the printed mpirun line by hand (ringtrain -vv bench ...)",
                        exit_code=proc.returncode)
    rows = parse_results(out)
    if not rows:
        raise JobFailed(f"benchmark job {job.module} printed no RESULT line",
                        "check the rank program's output with -vv")
    return rows, mon.foreign


def _wait(proc: subprocess.Popen[str], job: Job) -> str:
    try:
        out, _ = proc.communicate(timeout=job.timeout)
    except subprocess.TimeoutExpired as err:
        _stop_group(proc)
        raise JobFailed(f"benchmark job {job.module} {' '.join(job.args)} ran past "
                        f"{job.timeout:.0f} s", "use fewer sizes or repetitions, or a longer "
                        "--timeout", exit_code=124) from err
    except BaseException:  # Ctrl-C, SystemExit from SIGTERM: do not leave the job running
        _stop_group(proc)
        raise
    return out


@dataclass(frozen=True, slots=True)
class Round:
    rows: tuple[dict[str, Any], ...]
    before: ceilings.Quick
    after: ceilings.Quick
    drift: float
    attempts: int
    accepted: bool
    seconds: float
    label: str
    waited: float = 0.0
    foreign: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "attempts": self.attempts, "accepted": self.accepted,
                "drift": self.drift, "foreign_cpu": self.foreign, "seconds": self.seconds,
                "waited_for_quiet": self.waited,
                "before": self.before.as_dict(), "after": self.after.as_dict()}


def run_round(target: Target, job: Job, label: str, *, tolerance: float = 0.25,
              attempts: int = 3, quiet_wait: float = 0.0, foreign_max: float = 0.1) -> Round:
    """Run ``job`` until its bracketing ceilings drift less than ``tolerance`` and foreign
    processes used less than ``foreign_max`` of the machine meanwhile. When attempts run out,
    the least disturbed attempt is kept, marked ``accepted=False``. Each attempt first waits up
    to ``quiet_wait`` s for the CPUs to be idle (others share this machine)."""
    tried: list[Round] = []
    for attempt in range(1, attempts + 1):
        waited = ceilings.wait_for_quiet(quiet_wait) if quiet_wait > 0 else 0.0
        before = ceilings.quick()
        t0 = time.monotonic()
        rows, foreign = run_job_monitored(target, job)
        seconds = time.monotonic() - t0
        after = ceilings.quick()
        d = ceilings.drift(before, after)
        ok = d <= tolerance and foreign <= foreign_max
        tried.append(Round(tuple(rows), before, after, d, attempt, ok, seconds, label, waited,
                           foreign))
        log.info("round %s attempt %d: %.1f s (waited %.1f s for quiet), drift %.0f%%, "
                 "foreign CPU %.0f%%, load %.1f -> %.1f%s", label, attempt, seconds, waited,
                 100 * d, 100 * foreign, before.load.loadavg1, after.load.loadavg1,
                 "" if ok else " (rejected)")
        if ok:
            return tried[-1]
    best = min(tried, key=lambda r: (r.foreign > foreign_max, r.foreign + r.drift))
    return replace(best, attempts=len(tried))


def env_tuple(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(env.items()))


def sizes_arg(sizes: Sequence[int]) -> str:
    return ",".join(str(s) for s in sizes)
