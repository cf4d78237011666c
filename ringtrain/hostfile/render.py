"""Renderers: hosts, inventories and allocations as the text each consumer reads. Pure.

Every line-oriented renderer here has a parser in ``parse.py`` that reads its output back to
the same hosts (tested with hypothesis); ``render_inventory`` also covers YAML and TOML.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ringtrain.hostfile.model import Host, Inventory
from ringtrain.hostfile.nodeset import compress
from ringtrain.hostfile.render_structured import render_toml_inventory, render_yaml_inventory

if TYPE_CHECKING:
    from ringtrain.hostfile.allocate import Allocation

RENDER_FORMATS = ("openmpi", "mpich", "horovod", "nodelist", "pbs", "yaml", "toml", "json")


def render_openmpi_hostfile(hosts: Iterable[Host]) -> str:
    """Open MPI hostfile: ``name slots=N [max_slots=M]`` per line."""
    lines = []
    for h in hosts:
        line = f"{h.name} slots={h.slots}"
        if h.max_slots is not None:
            line += f" max_slots={h.max_slots}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def render_mpich_machinefile(hosts: Iterable[Host]) -> str:
    """MPICH/Intel MPI machinefile: ``name:N`` per line (IPv6 in brackets)."""
    return "".join(f"{_bracket(h.name)}:{h.slots}\n" for h in hosts)


def render_horovod_hosts(hosts: Iterable[Host]) -> str:
    """horovodrun ``-H`` value: ``h1:4,h2:4`` (IPv6 addresses in brackets)."""
    return ",".join(f"{_bracket(h.name)}:{h.slots}" for h in hosts)


def render_nodelist(hosts: Sequence[Host], *, with_slots: bool = True) -> str:
    """Slurm-style host lists in host order: ``gpu[01-04]:4,gpu07:8`` (``gpu[01-04],gpu07``).

    Consecutive hosts with the same slots share one expression; order is never changed.
    """
    items: list[str] = []
    run: list[Host] = []
    for host in [*hosts, None]:
        if host is not None and run and _same_run(run[0], host):
            run.append(host)
            continue
        if run:
            suffix = f":{run[0].slots}" if with_slots else ""
            names = [_bracket(h.name) for h in run] if ":" in run[0].name else [h.name for h in run]
            items.extend(f"{expr}{suffix}" for expr in compress(names))
        run = [host] if host is not None else []
    return ",".join(items) + "\n"


def _same_run(first: Host, host: Host) -> bool:
    return host.slots == first.slots and ":" not in host.name and ":" not in first.name


def render_pbs_nodefile(hosts: Iterable[Host]) -> str:
    """PBS_NODEFILE: each host's name once per slot, hosts in order."""
    return "".join(f"{h.name}\n" * h.slots for h in hosts)


def render_inventory(inventory: Inventory, fmt: str) -> str:
    """``inventory`` in one of RENDER_FORMATS. Formats without labels or SSH fields drop them."""
    renderers = {
        "openmpi": lambda: render_openmpi_hostfile(inventory.hosts),
        "mpich": lambda: render_mpich_machinefile(inventory.hosts),
        "horovod": lambda: render_horovod_hosts(inventory.hosts) + "\n",
        "nodelist": lambda: render_nodelist(inventory.hosts),
        "pbs": lambda: render_pbs_nodefile(inventory.hosts),
        "yaml": lambda: render_yaml_inventory(inventory),
        "toml": lambda: render_toml_inventory(inventory),
        "json": lambda: render_json(inventory_to_dict(inventory)),
    }
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(RENDER_FORMATS)}")
    return renderers[fmt]()


def host_to_dict(host: Host) -> dict[str, Any]:
    return {
        "name": host.name,
        "slots": host.slots,
        "max_slots": host.max_slots,
        "labels": dict(host.labels),
        "user": host.user,
        "port": host.port,
        "identity_file": host.identity_file,
        **({"address": host.address} if host.address else {}),
    }


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    return {
        "source": inventory.source,
        "format": inventory.format,
        "total_slots": inventory.total_slots,
        "hosts": [
            {**host_to_dict(h), "group": inventory.group_of(h.name)} for h in inventory.hosts
        ],
        "groups": {name: list(members) for name, members in inventory.groups},
    }


def allocation_to_dict(allocation: Allocation) -> dict[str, Any]:
    return {
        "np": allocation.np,
        "ring_label": allocation.ring_label,
        "ring_crossings": allocation.ring_crossings,
        "hosts": [host_to_dict(h) for h in allocation.hosts],
        "ranks": [
            {
                "rank": r.rank,
                "local_rank": r.local_rank,
                "local_size": r.local_size,
                "cross_rank": r.cross_rank,
                "cross_size": r.cross_size,
                "host": r.host,
            }
            for r in allocation.ranks
        ],
        "dropped": [{"host": h, "reason": why} for h, why in allocation.dropped],
        "openmpi_hostfile": render_openmpi_hostfile(allocation.hosts),
        "mpich_machinefile": render_mpich_machinefile(allocation.hosts),
        "horovod_hosts": render_horovod_hosts(allocation.hosts),
    }


def render_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _bracket(name: str) -> str:
    return f"[{name}]" if ":" in name else name
