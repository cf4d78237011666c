"""Where a launch's hosts come from: the inventory it names, else the Slurm or PBS allocation
it runs in, else this machine's own slots (one per GPU, or per CPU core without GPUs).

Shared by ``ringtrain launch`` and the Python API (``ringtrain.run``); the notes say what was
chosen, for the caller to show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ringtrain.hostfile import Host, Inventory, resolve_hosts
from ringtrain.launch import run
from ringtrain.remote import Remote
from ringtrain.schedulers.calls import inventory_from_scheduler, remote_for
from ringtrain.schedulers.jobenv import SchedulerJob
from ringtrain.spec import LaunchSpec


@dataclass(frozen=True, slots=True)
class Hosts:
    inventory: Inventory
    scheduler: SchedulerJob | None = None
    notes: tuple[str, ...] = ()

    @property
    def remote(self) -> Remote | None:
        """The Remote the allocation needs (srun steps inside Slurm); None: SSH."""
        return remote_for(self.scheduler)


def resolve(spec: LaunchSpec, environ: Mapping[str, str]) -> Hosts:
    inventory = resolve_hosts(spec.hosts_file, spec.host_spec, spec.hosts_format)
    if inventory is not None:
        return Hosts(inventory)
    sched = inventory_from_scheduler(environ)
    if sched is not None:
        notes = (f"no --hosts given; inside {sched.describe()}",
                 *(f"warning: {n}" for n in sched.notes))
        return Hosts(sched.inventory, sched, notes)
    gpus = run.count_local_gpus()
    slots = gpus or os.cpu_count() or 1
    what = f"{gpus} GPUs" if gpus else f"no GPUs, {slots} CPU cores"
    local = Inventory(hosts=(Host("localhost", slots),), source="local slots", format="local")
    return Hosts(local, None, (f"no --hosts given; using local slots (localhost:{slots}, {what})",))
