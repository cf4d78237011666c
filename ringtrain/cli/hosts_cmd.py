"""``ringtrain hosts``: show an inventory and where -np ranks would go. Runs nothing remote."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringtrain.cli import jsonout
from ringtrain.cli.defaults import with_layers
from ringtrain.cli.options import host_source_options, placement_options
from ringtrain.errors import AllocationError, UsageError
from ringtrain.hostfile import (
    RENDER_FORMATS,
    Allocation,
    AllocationPolicy,
    Host,
    Inventory,
    allocate,
    allocation_to_dict,
    inventory_to_dict,
    render_horovod_hosts,
    render_inventory,
    render_json,
    resolve_hosts,
)

_EPILOG = """\b
Examples:
  ringtrain hosts hosts/cluster.yaml -np 8
  ringtrain hosts -H gpu[01-04]:4 -np 12 --exclude gpu03
  ringtrain hosts hosts/cluster.yaml --ring-label rack --json
  ringtrain hosts hosts/pbs.nodefile --render openmpi > hostfile
"""


@click.command("hosts", epilog=_EPILOG)
@click.argument("source", required=False)
@host_source_options("Same as the SOURCE argument (--hostfile as horovodrun spells it).")
@click.option("-np", "--np", "--num-proc", "np", type=int,
              help="Number of ranks (default: every slot).")
@placement_options()
@click.option("--discovery-timeout", type=float, default=30.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print inventory and allocation as JSON.")
@click.option(
    "--render",
    type=click.Choice(RENDER_FORMATS),
    help="Print the allocated hosts in a format. Every format but json reads back as an "
    "inventory (yaml/toml keep labels and SSH settings); json is a report for tools.",
)
@click.pass_context
def command(
    ctx: click.Context,
    source: str | None,
    hosts_file: str | None,
    host_spec: str | None,
    hosts_format: str | None,
    np: int | None,
    min_hosts: int,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    slots: tuple[tuple[str, int], ...],
    ring_label: str | None,
    discovery_timeout: float,
    as_json: bool,
    render: str | None,
) -> None:
    """Show the hosts of SOURCE (any inventory format) and the allocation for -np ranks.

    Patterns are globs (gpu0*) or Slurm host lists (gpu[01-04,07]), comma-separated.
    """
    typed = ctx.get_parameter_source("hosts_file") is ParameterSource.COMMANDLINE
    if source is not None and typed:
        raise UsageError("SOURCE and --hosts both given", "pass the inventory once")
    hosts = with_layers(ctx, {"hosts_file": hosts_file, "host_spec": host_spec,
                              "hosts_format": hosts_format},
                        given={"hosts_file": source})  # SOURCE is the command line's --hosts
    inventory = resolve_hosts(
        hosts["hosts_file"], hosts["host_spec"], hosts["hosts_format"],
        discovery_timeout=discovery_timeout,
        note=lambda text: click.echo(f"ringtrain: {text}", err=True),
    )
    if inventory is None:
        raise UsageError("no hosts given", "pass an inventory file, or -H gpu01:4,gpu02:4")
    policy = AllocationPolicy(
        include=include, exclude=exclude, slot_overrides=slots, min_hosts=min_hosts,
        ring_label=ring_label,
    )
    if render:
        alloc = allocate(inventory, np, policy=policy)
        click.echo(render_inventory(_used(inventory, alloc), render), nl=False)
        return
    if as_json:
        alloc = allocate(inventory, np, policy=policy)
        data: dict[str, Any] = {
            "inventory": inventory_to_dict(inventory),
            "allocation": allocation_to_dict(alloc),
        }
        jsonout.echo(render_json(data), nl=False)
        return
    _show(inventory, np, policy)


def _show(inventory: Inventory, np: int | None, policy: AllocationPolicy) -> None:
    """The inventory table, then the allocation (or, after the table, its AllocationError)."""
    console = Console(highlight=False)
    console.print(_inventory_table(inventory))
    try:
        alloc = allocate(inventory, np, policy=policy)
    except AllocationError:
        console.print()
        raise
    console.print(_allocation_table(alloc))
    console.print(Text(f"horovodrun -np {alloc.np} -H {render_horovod_hosts(alloc.hosts)}"))


def _used(inventory: Inventory, alloc: Allocation) -> Inventory:
    """The allocated hosts (labels and SSH fields kept, slots as allocated) as an Inventory."""
    names = {h.name for h in alloc.hosts}
    groups = tuple(
        (group, kept)
        for group, members in inventory.groups
        if (kept := tuple(n for n in members if n in names))
    )
    return Inventory(
        hosts=alloc.hosts, source=inventory.source, format=inventory.format, groups=groups
    )


def _inventory_table(inventory: Inventory) -> Table:
    title = (
        f"{inventory.source} ({inventory.format}): "
        f"{_count(len(inventory.hosts), 'host')}, {_count(inventory.total_slots, 'slot')}"
    )
    columns: dict[str, list[str]] = {
        "host": [h.name for h in inventory.hosts],
        "slots": [str(h.slots) for h in inventory.hosts],
        "max": ["" if h.max_slots is None else str(h.max_slots) for h in inventory.hosts],
        "group": [inventory.group_of(h.name) or "" for h in inventory.hosts],
        "labels": [" ".join(f"{k}={v}" for k, v in h.labels) for h in inventory.hosts],
        "ssh": [_ssh(h) for h in inventory.hosts],
    }
    return _table(title, {k: v for k, v in columns.items() if any(v)})


def _table(title: str, columns: dict[str, list[str]]) -> Table:
    table = Table(title=Text(title), title_justify="left", min_width=len(title))
    for name in columns:
        table.add_column(name, justify="right" if name in ("slots", "max") else "left")
    for row in zip(*columns.values(), strict=True):
        table.add_row(*(Text(cell) for cell in row))
    return table


def _ssh(host: Host) -> str:
    if host.user is None and host.port is None and host.identity_file is None:
        return ""
    target = f"{host.user}@{host.name}" if host.user else host.name
    port = f" -p {host.port}" if host.port is not None else ""
    key = f" -i {host.identity_file}" if host.identity_file else ""
    return target + port + key


def _allocation_table(alloc: Allocation) -> Table:
    title = f"allocation: {alloc.np} ranks on {_count(len(alloc.hosts), 'host')}, in ring order"
    if alloc.ring_label is not None:
        title += f", grouped by {alloc.ring_label} ({alloc.ring_crossings} boundary crossings)"
    used = list(alloc.hosts)
    by_host = alloc.ranks_by_host()
    columns: dict[str, list[str]] = {
        "host": [h.name for h in used] + [name for name, _ in alloc.dropped],
        "ranks": [_span(by_host[h.name]) for h in used] + ["-"] * len(alloc.dropped),
        "local ranks": [_span(tuple(range(h.slots))) for h in used] + ["-"] * len(alloc.dropped),
    }
    if alloc.ring_label is not None:
        columns[alloc.ring_label] = [h.label(alloc.ring_label) or "-" for h in used] + [
            "" for _ in alloc.dropped
        ]
    columns["note"] = [""] * len(used) + [why for _, why in alloc.dropped]
    return _table(title, columns)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _span(ranks: tuple[int, ...]) -> str:
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
