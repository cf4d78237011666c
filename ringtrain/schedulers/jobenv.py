"""Slurm and PBS: which scheduler runs this job, and the inventory it granted. Pure.

Inside an allocation ``ringtrain launch`` needs no ``--hosts``: the scheduler already said which
nodes the job has and how many tasks each runs.

* Slurm (``SLURM_JOB_ID``): nodes from ``SLURM_JOB_NODELIST`` (``gpu[01-04]``), tasks per node
  from ``SLURM_TASKS_PER_NODE`` (``2(x3),1``); each host's slots are its tasks. GPUs per node come
  from ``scontrol show job -d`` (one ``Nodes=... GRES=gpu:2(IDX:0-1)`` line per group of nodes)
  when the caller read it, else from ``SLURM_GPUS_ON_NODE`` (the batch node's count, assumed for
  every node). They become each host's ``gpus`` label. The default backend is ``srun``.
* PBS / Torque (``PBS_JOBID`` or ``PBS_NODEFILE``): ``$PBS_NODEFILE`` lists one short host name
  per MPI process in chunk order; a host's slots are its line count. The default backend is
  ``mpirun`` (over SSH, as PBS sites allow between the job's nodes).

Slurm wins when both are set (PBS compatibility layers on Slurm sites set ``PBS_*`` too).
The caller does the I/O (``schedulers.calls`` reads the node file and runs scontrol) and hands the
text in, so everything here is a function of its arguments.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ringtrain.errors import InventoryError, SchedulerError
from ringtrain.hostfile import Inventory, parse_pbs_nodefile, parse_slurm_env
from ringtrain.hostfile.model import host_name_problem
from ringtrain.hostfile.nodeset import HostListError, expand, split_items
from ringtrain.spec import Backend

_GRES_ITEM_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)(?::(?P<type>[A-Za-z0-9_.-]+))??(?::(?P<count>\d+))?"
    r"(?:\((?P<extra>[^)]*)\))?$"
)
_IDX_RE = re.compile(r"IDX:(?P<idx>[0-9,\-]+|N/A)")
_NODES_RE = re.compile(r"(?:^|\s)Nodes=(?P<nodes>\S+)")
_GRES_FIELD_RE = re.compile(r"(?:^|\s)(?:GRES|GRES_IDX)=(?P<gres>\S+)")
_COUNT_RE = re.compile(r"^\s*(?:[A-Za-z0-9_.-]+:)*(?P<count>\d+)\s*$")


class Scheduler(enum.Enum):
    SLURM = "slurm"
    PBS = "pbs"


@dataclass(frozen=True, slots=True)
class SchedulerJob:
    """The allocation a scheduler granted this job, as an inventory ringtrain can launch on.

    ``origin`` says which variables the inventory came from (printed by the launcher);
    ``notes`` are things worth telling the user (GPU and task counts that do not match).
    """

    scheduler: Scheduler
    job_id: str
    inventory: Inventory
    origin: str
    notes: tuple[str, ...] = ()

    @property
    def default_backend(self) -> Backend:
        return Backend.SRUN if self.scheduler is Scheduler.SLURM else Backend.MPIRUN

    def describe(self) -> str:
        hosts = self.inventory.hosts
        return (
            f"{self.scheduler.value} job {self.job_id}: {len(hosts)} node(s), "
            f"{self.inventory.total_slots} slots ({self.origin})"
        )


def detect_scheduler(environ: Mapping[str, str]) -> Scheduler | None:
    """Which scheduler's job this process runs in, from its environment; None outside one."""
    if environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):
        return Scheduler.SLURM
    if environ.get("PBS_JOBID") or environ.get("PBS_NODEFILE"):
        return Scheduler.PBS
    return None


def slurm_job(environ: Mapping[str, str], scontrol_text: str | None = None,
              nodes_text: str | None = None) -> SchedulerJob:
    """The Slurm allocation from the job environment (and ``scontrol show job -d`` output for
    the GPUs, ``scontrol -o show node`` output for each node's address)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    _refuse_inside_step(environ)
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    tasks = environ.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not tasks:
        missing = "SLURM_JOB_NODELIST" if not nodelist else "SLURM_TASKS_PER_NODE"
        raise SchedulerError(
            f"Slurm job {job_id}: {missing} is not set, so the job's nodes are unknown",
            "run `ringtrain launch` from the sbatch script or the salloc shell, or pass --hosts",
        )
    try:
        inventory = parse_slurm_env(nodelist, tasks, source="SLURM")
    except InventoryError as err:
        raise SchedulerError(f"Slurm job {job_id}: {err.message}", err.hint) from err
    gpus = slurm_gpus(inventory.names, environ, scontrol_text)
    inventory = _with_gpu_labels(inventory, gpus)
    inventory = _with_addresses(inventory, parse_scontrol_node_addrs(nodes_text or ""))
    origin = f"SLURM_JOB_NODELIST={nodelist} SLURM_TASKS_PER_NODE={tasks}"
    return SchedulerJob(Scheduler.SLURM, job_id, inventory, origin, _gpu_notes(inventory, gpus))


def _refuse_inside_step(environ: Mapping[str, str]) -> None:
    """Inside an srun step the task variables describe the step, and N copies would launch."""
    if "SLURM_STEP_ID" not in environ:
        return
    step_tasks = environ.get("SLURM_STEP_NUM_TASKS", "1")
    raise SchedulerError(
        f"ringtrain launch runs inside Slurm step {environ['SLURM_STEP_ID']} "
        f"({step_tasks} task(s)); it must run once per job, outside any srun step",
        "call `ringtrain launch` directly in the sbatch script or salloc shell, not via srun: "
        "it starts the ranks with srun itself",
    )


def slurm_gpus(
    nodes: tuple[str, ...], environ: Mapping[str, str], scontrol_text: str | None
) -> dict[str, int]:
    """GPUs per node: scontrol's per-node GRES when given, else SLURM_GPUS_ON_NODE for all."""
    if scontrol_text:
        per_node = parse_scontrol_gpus(scontrol_text)
        if per_node:
            return {n: per_node.get(n, 0) for n in nodes}
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        m = _COUNT_RE.match(environ.get(name, ""))
        if m is not None:
            return dict.fromkeys(nodes, int(m.group("count")))
    return {}


def parse_scontrol_gpus(text: str) -> dict[str, int]:
    """Node -> GPUs from ``scontrol show job -d``'s detail lines, e.g.
    ``Nodes=gpu[01-02] CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:0-1)``. Nodes without GPUs map to 0;
    lines that cannot be read are skipped (the caller falls back to the environment)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        nodes_m = _NODES_RE.search(line)
        if nodes_m is None or "CPU_IDs=" not in line:
            continue
        try:
            names = expand(nodes_m.group("nodes"))
        except HostListError:
            continue
        gres_m = _GRES_FIELD_RE.search(line)
        count = gres_gpu_count(gres_m.group("gres")) if gres_m else 0
        for name in names:
            out[name] = count
    return out


def gres_gpu_count(field: str) -> int:
    """GPUs in one GRES value: ``gpu:2(IDX:0-1)``, ``gpu:a100:2(IDX:0,2),nic:1``,
    ``gpu(IDX:0-3)``."""
    total = 0
    for item, _ in _split_gres(field):
        m = _GRES_ITEM_RE.match(item.strip())
        if m is None or m.group("name") != "gpu":
            continue
        if m.group("count") is not None:
            total += int(m.group("count"))
        elif m.group("extra"):
            total += _idx_count(m.group("extra"))
    return total


def _split_gres(field: str) -> list[tuple[str, int]]:
    """Split at commas outside parentheses (``IDX:0,2`` holds commas)."""
    items: list[tuple[str, int]] = []
    depth = start = 0
    for i, char in enumerate(field):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append((field[start:i], start))
            start = i + 1
    items.append((field[start:], start))
    return items


def _idx_count(extra: str) -> int:
    m = _IDX_RE.search(extra)
    if m is None or m.group("idx") == "N/A":
        return 0
    count = 0
    for part, _ in split_items(m.group("idx")):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            count += int(hi or lo) - int(lo) + 1
    return count


def _with_gpu_labels(inventory: Inventory, gpus: Mapping[str, int]) -> Inventory:
    if not gpus:
        return inventory
    hosts = tuple(
        replace(h, labels=(*h.labels, ("gpus", str(gpus[h.name])))) if h.name in gpus else h
        for h in inventory.hosts
    )
    return replace(inventory, hosts=hosts)


def parse_scontrol_node_addrs(text: str) -> dict[str, str]:
    """NodeName -> NodeAddr from ``scontrol -o show node`` (one node a line). NodeAddr is
    where Slurm itself reaches a node; it defaults to the NodeName, and differs where names
    are not resolvable host names (``NodeAddr=10.1.1.17``, or emulated nodes at 127.0.0.1).
    Values that fail the host name check are left out, and so are IPv6 ones (a TF address is
    ``host:port``): those nodes keep their names."""
    out = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name, addr = fields.get("NodeName"), fields.get("NodeAddr")
        if name and addr and ":" not in addr and host_name_problem(addr) is None:
            out[name] = addr
    return out


def _with_addresses(inventory: Inventory, addrs: Mapping[str, str]) -> Inventory:
    hosts = tuple(replace(h, address=addrs[h.name]) if addrs.get(h.name, h.name) != h.name
                  else h for h in inventory.hosts)
    return replace(inventory, hosts=hosts)


def _gpu_notes(inventory: Inventory, gpus: Mapping[str, int]) -> tuple[str, ...]:
    notes = []
    for host in inventory.hosts:
        count = gpus.get(host.name)
        if count and host.slots > count:
            notes.append(
                f"{host.name}: {host.slots} tasks but {count} GPU(s) granted; ranks will share "
                "GPUs (ask for --ntasks-per-node equal to --gpus-per-node)"
            )
    return tuple(notes)


def pbs_job(environ: Mapping[str, str], nodefile_text: str) -> SchedulerJob:
    """The PBS allocation: ``nodefile_text`` is the content of ``$PBS_NODEFILE``."""
    job_id = environ.get("PBS_JOBID", "")
    path = environ.get("PBS_NODEFILE", "PBS_NODEFILE")
    try:
        inventory = parse_pbs_nodefile(nodefile_text, source=path)
    except InventoryError as err:
        raise SchedulerError(f"PBS job {job_id}: {err.message}", err.hint) from err
    return SchedulerJob(Scheduler.PBS, job_id, inventory, f"PBS_NODEFILE={path}")


def missing_pbs_nodefile(environ: Mapping[str, str]) -> SchedulerError:
    job_id = environ.get("PBS_JOBID", "")
    return SchedulerError(
        f"PBS job {job_id}: PBS_NODEFILE is not set or cannot be read "
        f"({environ.get('PBS_NODEFILE', 'unset')})",
        "run `ringtrain launch` from the qsub job script on the job's first node, or pass --hosts",
    )
