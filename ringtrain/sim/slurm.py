"""A real Slurm cluster on this machine: munged, slurmctld and N slurmd, as root, no systemd.

Nodes ``gpu01..gpuNN`` are emulated slurmd processes (``slurmd -N gpu01``) sharing this host;
each has ``Gres=gpu:G`` backed by files that are symlinks to /dev/null (so jobs see
SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES) and its own port, spool and tmp dirs. Everything
lives in the state dir (configs, munge key and socket, state, logs, PID files); clients find the
cluster through ``SLURM_CONF=<state dir>/slurm.conf`` (see ``SlurmSim.environ``).

``slurm_down`` stops what ``slurm_up`` started, by the PIDs it recorded (start times checked, so
a recycled PID is never touched), after cancelling the jobs. Job processes that outlive their
daemons are found as the descendants of this cluster's ``slurmstepd`` processes (recognised by
the log file they hold open in the state dir) and by ``SLURM_CONF=<this cluster's conf>`` with a
``SLURM_JOB_ID`` in their environment. Nothing is ever matched by name alone.

Measured here: up 1-3 s, down 0.3-2 s. Jobs on emulated nodes share one hostname: Open MPI
must use ``btl=self,tcp`` with ``btl_tcp_if_include=lo`` (shared memory across "nodes" crashes).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ringtrain.errors import SimError
from ringtrain.sim.config import SAFE_PATH_RE, default_state_dir, registry_file
from ringtrain.sim.ports import free_ports, ports_free
from ringtrain.sim.proc import locked, read_pid, stop_pids
from ringtrain.sim.slurm_procs import job_processes, same_process, start_time

log = logging.getLogger(__name__)

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
PMIX_PLUGIN = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so")
APT_HINT = "apt-get install -y slurm-wlm munge libpmix-dev"
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SlurmSimConfig:
    name: str = "rts"
    nodes: int = 4
    gpus_per_node: int = 4
    cpus_per_node: int = 8
    state_dir: Path | None = None
    kill_wait_s: int = 5
    # How long a requeued job waits before it may run again (Slurm's AuthInfo cred_expire,
    # 120 s by default, which would make every requeue test wait two minutes).
    cred_expire_s: int = 20
    # Seconds between the main scheduler's passes (SchedulerParameters sched_interval, 60 s by
    # default). Once a requeued job's begin time (cred_expire + 1 s) has passed, only such a
    # pass starts it: `scontrol requeue` to RUNNING took 59 s with the default, 21 s with 1 s.
    sched_interval_s: int = 1

    def __post_init__(self) -> None:
        if not (self.name.isascii() and self.name.isalnum() and len(self.name) <= 16):
            raise SimError(f"Slurm sim name {self.name!r} is not 1-16 letters and digits",
                           hint="pass e.g. --name rts")
        if not 1 <= self.nodes <= 64 or not 0 <= self.gpus_per_node <= 16:
            raise SimError(f"{self.nodes} nodes x {self.gpus_per_node} GPUs is out of range",
                           hint="use 1-64 nodes and 0-16 GPUs per node")
        if not 1 <= self.cpus_per_node <= 256:
            raise SimError(f"{self.cpus_per_node} CPUs per node is out of range",
                           hint="use 1-256 CPUs per node")

    @property
    def key(self) -> str:
        return f"slurm-{self.name}"

    @property
    def resolved_state_dir(self) -> Path:
        return (self.state_dir or default_state_dir(self.key)).absolute()

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"gpu{i:02d}" for i in range(1, self.nodes + 1))


@dataclass(frozen=True, slots=True)
class SlurmSim:
    """A running cluster: where its files are and what its daemons' PIDs are."""

    config: SlurmSimConfig
    state_dir: Path
    pids: tuple[tuple[str, int, int], ...]  # (daemon, pid, start time)
    shape: tuple[int, int, int] = (0, 0, 0)  # nodes, GPUs and CPUs per node it was built with

    @property
    def slurm_conf(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.config.node_names

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) plus SLURM_CONF for this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.slurm_conf)
        return env


def unavailable() -> str | None:
    """Why a Slurm sim cannot run here (not root, packages missing); None when it can."""
    if os.geteuid() != 0:
        return "the Slurm sim runs munged, slurmctld and slurmd as root; CI runs as root"
    missing = [d for d in DAEMONS if not Path(d).exists()]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if not PMIX_PLUGIN.exists() and not PMIX_PLUGIN.with_name("mpi_pmix_v4.so").exists():
        missing.append(str(PMIX_PLUGIN))
    if missing:
        return f"missing {', '.join(missing)}: {APT_HINT}"
    return None


def slurm_up(cfg: SlurmSimConfig) -> SlurmSim:
    """Start the cluster (a healthy one is left as is) and wait until every node is idle."""
    reason = unavailable()
    if reason:
        raise SimError(f"cannot start a Slurm sim: {reason}", hint=APT_HINT)
    with locked(cfg.key):
        current = load(cfg)
        if current is not None and current.shape == _shape(cfg) and _healthy(current):
            return current
        _teardown(cfg)
        sim = _start(cfg)
    return sim


def slurm_down(cfg: SlurmSimConfig) -> list[str]:
    """Cancel every job, stop every daemon and job process of the cluster; verify.

    Returns nothing to report when clean; raises SimError naming what is left otherwise."""
    with locked(cfg.key):
        left = _teardown(cfg)
    if left:
        raise SimError(f"Slurm sim {cfg.name}: processes still running: {'; '.join(left)}",
                       hint="stop them by PID, then run `ringtrain slurm sim down` again")
    return left


def load(cfg: SlurmSimConfig) -> SlurmSim | None:
    try:
        data = json.loads((cfg.resolved_state_dir / "pids.json").read_text())
        pids = tuple((str(n), int(p), int(s)) for n, p, s in data["pids"])
        nodes, gpus, cpus = (int(v) for v in data["shape"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return SlurmSim(cfg, cfg.resolved_state_dir, pids, (nodes, gpus, cpus))


def _shape(cfg: SlurmSimConfig) -> tuple[int, int, int]:
    return (cfg.nodes, cfg.gpus_per_node, cfg.cpus_per_node)


def status(sim: SlurmSim) -> dict[str, object]:
    """Daemons (alive or not) and ``sinfo`` node states."""
    daemons = {name: pid if same_process(pid, start) else None for name, pid, start in sim.pids}
    nodes = _node_states(sim) if all(daemons.values()) else {}
    return {"state_dir": str(sim.state_dir), "slurm_conf": str(sim.slurm_conf),
            "daemons": daemons, "nodes": nodes}


# --------------------------------------------------------------------------- files


def render_slurm_conf(cfg: SlurmSimConfig, state: Path, host: str, ports: list[int]) -> str:
    """slurm.conf for ``cfg``: ports[0] for slurmctld, ports[1:] one per node. Pure."""
    first, last = ports[1], ports[1] + cfg.nodes - 1
    nodes = f"gpu[01-{cfg.nodes:02d}]"
    gres = f" Gres=gpu:{cfg.gpus_per_node}" if cfg.gpus_per_node else ""
    lines = [
        f"ClusterName=rt{cfg.name}", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={state}/run/munge.socket,cred_expire={cfg.cred_expire_s}",
        "CredType=cred/munge", f"StateSaveLocation={state}/state",
        f"SlurmdSpoolDir={state}/spool/%n", f"SlurmctldPidFile={state}/run/slurmctld.pid",
        f"SlurmdPidFile={state}/run/slurmd-%n.pid", f"SlurmctldLogFile={state}/log/slurmctld.log",
        f"SlurmdLogFile={state}/log/slurmd-%n.log", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        f"SchedulerParameters=batch_sched_delay=0,sched_interval={cfg.sched_interval_s}",
        f"TmpFS={state}/nodetmp/%n", "GresTypes=gpu", "MpiDefault=none", "ReturnToService=2",
        "MailProg=/bin/true", f"KillWait={cfg.kill_wait_s}", "InactiveLimit=0",
        f"NodeName={nodes} NodeHostname={host} NodeAddr=127.0.0.1 Port={first}-{last} "
        f"CPUs={cfg.cpus_per_node}{gres} State=UNKNOWN",
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def render_gres_conf(cfg: SlurmSimConfig, state: Path) -> str:
    lines = ["AutoDetect=off"]
    if cfg.gpus_per_node:
        files = f"{state}/dev/nvidia[0-{cfg.gpus_per_node - 1}]"
        lines.append(f"NodeName=gpu[01-{cfg.nodes:02d}] Name=gpu File={files}")
    return "\n".join(lines) + "\n"


def _write_files(cfg: SlurmSimConfig, state: Path, ports: list[int]) -> None:
    for sub in ("run", "state", "log", "dev"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    for node in cfg.node_names:
        (state / "spool" / node).mkdir(parents=True, exist_ok=True)
        (state / "nodetmp" / node).mkdir(parents=True, exist_ok=True)
    for i in range(cfg.gpus_per_node):
        dev = state / "dev" / f"nvidia{i}"
        dev.unlink(missing_ok=True)
        dev.symlink_to("/dev/null")
    munge = state / "munge"
    munge.mkdir(mode=0o700, exist_ok=True)
    key = munge / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    (state / "slurm.conf").write_text(render_slurm_conf(cfg, state, host, ports))
    (state / "gres.conf").write_text(render_gres_conf(cfg, state))
    (state / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")


def _node_ports(nodes: int) -> list[int]:
    """One port for slurmctld, then ``nodes`` consecutive free ports (Port=first-last)."""
    for _ in range(50):
        ctld, base = free_ports(2)
        if base + nodes > 65000 or ctld in range(base, base + nodes):
            continue
        if not ports_free(range(base, base + nodes), "0.0.0.0"):  # noqa: S104 - a probe only
            continue
        return [ctld, base]
    raise SimError("no free block of ports for the slurmd daemons", hint="retry in a moment")


# --------------------------------------------------------------------------- processes


def _start(cfg: SlurmSimConfig) -> SlurmSim:
    state = cfg.resolved_state_dir
    if len(f"{state}/run/munge.socket") > 100 or not SAFE_PATH_RE.match(str(state)):
        raise SimError(f"Slurm sim state dir {state} is too long or has special characters "
                       "(the munge socket path must stay under 108 bytes)",
                       hint="pass a short plain --state-dir such as /tmp/rts")
    _write_files(cfg, state, _node_ports(cfg.nodes))
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "SLURM_CONF": str(state / "slurm.conf")}
    munge = state / "munge"
    _daemon(["/usr/sbin/munged", "--force", f"--key-file={munge}/munge.key",
             f"--socket={state}/run/munge.socket", f"--pid-file={state}/run/munged.pid",
             f"--seed-file={munge}/munged.seed", f"--log-file={state}/log/munged.log"],
            env, state / "log" / "munged.out")
    pids = [("munged", *_pid_from(state / "run" / "munged.pid"))]
    conf = str(state / "slurm.conf")
    _daemon(["/usr/sbin/slurmctld", "-c", "-f", conf], env, state / "log" / "slurmctld.out")
    pids.append(("slurmctld", *_pid_from(state / "run" / "slurmctld.pid")))
    for node in cfg.node_names:
        _daemon(["/usr/sbin/slurmd", "-f", conf, "-N", node], env, state / "log" / f"{node}.out")
        pids.append((f"slurmd:{node}", *_pid_from(state / "run" / f"slurmd-{node}.pid")))
    sim = SlurmSim(cfg, state, tuple(pids), _shape(cfg))
    (state / "pids.json").write_text(json.dumps({"pids": [list(p) for p in pids],
                                                 "shape": list(_shape(cfg))}))
    registry_file(cfg.key).parent.mkdir(parents=True, exist_ok=True)
    registry_file(cfg.key).write_text(f"{state}\n")
    _wait_ready(sim)
    return sim


def _daemon(argv: list[str], env: dict[str, str], out: Path) -> None:
    """Run a daemon that forks itself into the background. Its output goes to a file, not a
    pipe: the forked daemon may keep the descriptors open long after its parent exits."""
    with open(out, "wb") as fh:
        try:
            rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, env=env,
                                timeout=30, check=False).returncode
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SimError(f"{argv[0]} failed to start: {err}", hint=APT_HINT) from err
    if rc != 0:
        tail = out.read_text(errors="replace").strip()[-300:]
        raise SimError(f"{argv[0]} failed to start (exit {rc}): {tail}",
                       hint=f"see {out.parent} for the daemon logs")


def _client(sim: SlurmSim, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """A Slurm client command against this cluster; a failure is returned, not raised."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False,
                              env=sim.environ(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(argv, 1, "", str(err))


def _pid_from(path: Path, timeout: float = 10.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = read_pid(path)
        if pid is None:
            time.sleep(0.05)
            continue
        start = start_time(pid)
        if start is not None:
            return pid, start
        time.sleep(0.05)
    raise SimError(f"no running daemon behind {path}",
                   hint=f"see the logs in {path.parent.parent}/log")


def _wait_ready(sim: SlurmSim) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = _node_states(sim)
        if len(states) == sim.config.nodes and all(s == "idle" for s in states.values()):
            return
        time.sleep(0.2)
    raise SimError(f"Slurm nodes not idle after {READY_TIMEOUT_S:g} s: {states}",
                   hint=f"see {sim.state_dir}/log/slurmctld.log and slurmd-*.log")


def _node_states(sim: SlurmSim) -> dict[str, str]:
    done = _client(sim, ["sinfo", "-h", "-N", "-o", "%N %t"])
    if done.returncode != 0:
        return {}
    pairs = (line.split() for line in done.stdout.splitlines())
    return {p[0]: p[1].rstrip("*~#$@^-") for p in pairs if len(p) == 2}


def _healthy(sim: SlurmSim) -> bool:
    if not all(same_process(pid, start) for _, pid, start in sim.pids):
        return False
    states = _node_states(sim)
    return len(states) == sim.config.nodes and all(
        s in ("idle", "mix", "alloc") for s in states.values()
    )


def _teardown(cfg: SlurmSimConfig) -> list[str]:
    """Cancel jobs, stop job processes, then slurmd, slurmctld and munged; what is left."""
    state = cfg.resolved_state_dir
    sim = load(cfg)
    daemons = [d for d in sim.pids if same_process(d[1], d[2])] if sim else []
    if sim is not None and any(name == "slurmctld" for name, _, _ in daemons):
        _cancel_jobs(sim)
    stop_pids(job_processes(state), grace=1.0)
    for kind in ("slurmd:", "slurmctld", "munged"):
        stop_pids([pid for name, pid, _ in daemons if name.startswith(kind)], grace=3.0)
    stop_pids(job_processes(state), grace=0.5)
    left = [f"{pid} {name}" for name, pid, start in daemons if same_process(pid, start)]
    left += [f"{pid} job process" for pid in job_processes(state)]
    (state / "pids.json").unlink(missing_ok=True)
    registry_file(cfg.key).unlink(missing_ok=True)
    return left


def _cancel_jobs(sim: SlurmSim) -> None:
    """scancel every job and wait (KillWait plus a little) for them to leave the queue."""
    done = _client(sim, ["squeue", "-h", "-o", "%A"])
    jobs = [j for j in done.stdout.split() if j.isdigit()]
    if not jobs:
        return
    _client(sim, ["scancel", *jobs])
    deadline = time.monotonic() + sim.config.kill_wait_s + 3
    while time.monotonic() < deadline:
        done = _client(sim, ["squeue", "-h", "-o", "%A"])
        if done.returncode != 0 or not done.stdout.split():
            return
        time.sleep(0.2)
