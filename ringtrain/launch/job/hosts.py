"""Where a launch's hosts come from: the inventory it names, else the Slurm or PBS allocation
it runs in, else this machine's own slots (one per GPU, or per CPU core without GPUs).

Shared by ``ringtrain launch`` and the Python API (``ringtrain.run``); the notes say what was
chosen, for the caller to show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ringtrain.hostfile import Host, Inventory, resolve_hosts
from ringtrain.launch.job import run
from ringtrain.launch.plan.secretvars import Secrecy, public_environ
from ringtrain.probe import names
from ringtrain.remote import Remote
from ringtrain.schedulers.calls import inventory_from_scheduler, remote_for
from ringtrain.schedulers.jobenv import SchedulerJob
from ringtrain.spec import LaunchSpec, SshSpec


@dataclass(frozen=True, slots=True)
class Hosts:
    inventory: Inventory
    scheduler: SchedulerJob | None = None
    notes: tuple[str, ...] = ()
    # the srun steps' environment (srun ships it to each node's slurmd): the launcher's less
    # its secrets and the variables --env names (secretvars.public_environ)
    step_environ: Mapping[str, str] | None = field(default=None, repr=False)

    @property
    def remote(self) -> Remote | None:
        """The Remote the allocation needs (srun steps inside Slurm); None: SSH."""
        return remote_for(self.scheduler, self.step_environ)


def resolve(spec: LaunchSpec, environ: Mapping[str, str]) -> Hosts:
    said: list[str] = []
    inventory = resolve_hosts(spec.hosts_file, spec.host_spec, spec.hosts_format,
                              note=said.append)
    if inventory is not None:
        inventory = with_ssh_defaults(mark_this_machine(inventory), spec.ssh)
        here = [h.name for h in inventory.hosts if h.local]
        notes: tuple[str, ...] = (*said, *(
            (f"{', '.join(here)}: this machine; its ranks start without SSH",) if here else ()))
        return Hosts(inventory, notes=notes)
    sched = inventory_from_scheduler(environ)
    if sched is not None:
        notes = (f"no --hosts given; inside {sched.describe()}",
                 *(f"warning: {n}" for n in sched.notes))
        steps = public_environ(environ, Secrecy.of(spec.env).secret)
        return Hosts(sched.inventory, sched, notes, steps)
    gpus = run.count_local_gpus()
    slots = gpus or os.cpu_count() or 1
    what = f"{gpus} GPUs" if gpus else f"no GPUs, {slots} CPU cores"
    local = Inventory(hosts=(Host("localhost", slots),), source="local slots", format="local")
    return Hosts(local, None, (f"no --hosts given; using local slots (localhost:{slots}, {what})",))


def with_ssh_defaults(inventory: Inventory, ssh: SshSpec) -> Inventory:
    """``-p``/``-i`` for every remote host whose inventory line names no port or key."""
    if ssh.port is None and ssh.identity_file is None:
        return inventory
    hosts = tuple(
        h if h.is_local else replace(
            h, port=h.port or ssh.port, identity_file=h.identity_file or ssh.identity_file)
        for h in inventory.hosts
    )
    return replace(inventory, hosts=hosts)


def mark_this_machine(inventory: Inventory) -> Inventory:
    """Hosts named by this machine's host name, or by a name that resolves to one of its own
    addresses, run their ranks here without SSH, as horovodrun (and mpirun) treat them. Names
    are resolved once, in parallel, under one budget (probe/names.py)."""
    candidates = [h.name for h in inventory.hosts if not h.is_local]
    if not candidates:
        return inventory
    own = names.this_host()
    addresses = names.resolve(candidates)
    found = {name for name in candidates
             if name == own or any(names.can_bind(a) for a in addresses[name])}
    if not found:
        return inventory
    hosts = tuple(replace(h, local=True) if h.name in found else h for h in inventory.hosts)
    return replace(inventory, hosts=hosts)
