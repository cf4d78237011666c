"""Line-oriented host sources -> Inventory. Pure: text in, Inventory out.

Every error is an InventoryError naming the source, line and column (both from 1), what is
wrong and how to fix it. Item grammar shared by ``-H``, machinefiles, nodelists and discovery
script output: ``NAME[:SLOTS]`` where NAME is a host name, FQDN, IPv4 address, ``[IPv6]``, or
(``-H`` and nodelists only) a Slurm host list such as ``gpu[01-04,07]`` (see nodeset.py); the
``:SLOTS`` is the first ':' outside brackets. Open MPI hostfiles have their own reader,
openmpi.py.
"""

from __future__ import annotations

import ipaddress
import re

from ringtrain.hostfile.checks import UniqueHosts, Where, check_name, parse_count
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.hostfile.nodeset import HostListError, expand, is_host_list, split_items
from ringtrain.hostfile.openmpi import parse_openmpi_hostfile

__all__ = [
    "parse_host_spec",
    "parse_item",
    "parse_mpich_machinefile",
    "parse_nodelist",
    "parse_openmpi_hostfile",
    "parse_pbs_nodefile",
    "parse_slurm_env",
]

_BRACKETED_RE = re.compile(r"^\[(?P<addr>[^\]]*)\](?::(?P<slots>.*))?$")
_WORD_RE = re.compile(r"\S+")


def parse_host_spec(spec: str, source: str = "-H") -> Inventory:
    """horovodrun-style ``h1:4,h2:4`` (slots default to 1; IPv6 as ``[::1]:2``; host lists ok).

    ``localhost:0`` is read as horovodrun reads it: the host is listed and gets no rank.
    """
    where = Where(source, 1, 1)
    hosts = UniqueHosts()
    for item, offset in split_items(spec.replace("\n", ",")):
        stripped = item.strip()
        col = offset + 1 + len(item) - len(item.lstrip())
        if not stripped:
            raise where.at(1, col).error(
                "empty host entry", "remove the stray comma; write hosts as gpu01:4,gpu02:4"
            )
        at = where.at(1, col)
        hosts.extend(parse_item(stripped, at, host_lists=True, zero_slots=True), at)
    found = hosts.result(where, "gpu01:4")
    if not any(h.slots for h in found):
        raise where.error("every host has 0 slots, so no rank can start",
                          "give at least one host a slot count, e.g. gpu01:4")
    return Inventory(hosts=found, source=source, format="horovod")


def parse_item(
    item: str, where: Where, *, host_lists: bool, zero_slots: bool = False
) -> tuple[Host, ...]:
    """One ``NAME[:SLOTS]`` item -> hosts (several when NAME is a host list)."""
    m = _BRACKETED_RE.match(item)
    if m is not None:
        name, slot_text = m.group("addr"), m.group("slots")
        _check_ipv6(name, where)
    elif item.count(":") >= 2 and not is_host_list(item):
        name, slot_text = item, None
        _check_ipv6(name, where)
    else:
        name, slot_text = _split_slots(item)
    slots = 1 if slot_text is None else parse_count(slot_text, "slots", where, zero_ok=zero_slots)
    if host_lists and is_host_list(name):
        try:
            names = expand(name)
        except HostListError as err:
            raise where.error(
                f"bad host list {name!r}: {err}",
                err.hint or "write host lists like gpu[01-04,07] (numeric ranges in brackets)",
            ) from None
    else:
        names = (name,)
    return tuple(Host(name=check_name(n, where), slots=slots) for n in names)


def _split_slots(item: str) -> tuple[str, str | None]:
    """``NAME:SLOTS`` at the first ':' outside brackets (``a[1-10:2]`` has none)."""
    parts = split_items(item, ":")
    if len(parts) == 1:
        return item, None
    return parts[0][0], item[parts[1][1]:]


def _check_ipv6(name: str, where: Where) -> None:
    try:
        ipaddress.IPv6Address(name.partition("%")[0])
    except ValueError:
        raise where.error(
            f"{name!r} is neither NAME:SLOTS nor an IPv6 address",
            "write IPv6 hosts in brackets with their slots, e.g. [fd00::1]:4",
        ) from None
    check_name(name, where)


def parse_mpich_machinefile(text: str, source: str, *, fmt: str = "mpich") -> Inventory:
    """MPICH/Intel MPI machinefile: ``host[:N]`` per line (also discovery script output)."""
    hosts = UniqueHosts()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0]
        words = [(m.group(), m.start() + 1) for m in _WORD_RE.finditer(body)]
        if not words:
            continue
        if len(words) > 1:
            word, col = words[1]
            raise Where(source, lineno, col).error(
                f"unexpected {word!r} after the host entry",
                "write one 'host:slots' entry per line, e.g. gpu01:4",
            )
        word, col = words[0]
        where = Where(source, lineno, col)
        hosts.extend(parse_item(word, where, host_lists=False), where)
    return Inventory(hosts=hosts.result(Where(source), "gpu01:4"), source=source, format=fmt)


def parse_nodelist(text: str, source: str) -> Inventory:
    """Slurm-style host lists, ``gpu[01-04,07]:4 cpu01``; commas, spaces or newlines between."""
    hosts = UniqueHosts()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0]
        for item, offset in split_items(body, ", \t"):
            if item:
                where = Where(source, lineno, offset + 1)
                hosts.extend(parse_item(item, where, host_lists=True), where)
    where = Where(source)
    return Inventory(hosts=hosts.result(where, "gpu[01-04]:4"), source=source, format="nodelist")


def parse_pbs_nodefile(text: str, source: str) -> Inventory:
    """PBS_NODEFILE: one host name per MPI process; a host's slots are its line count.

    Hosts keep the order of their first line (PBS writes chunks in order).
    """
    slots: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        words = [(m.group(), m.start() + 1) for m in _WORD_RE.finditer(raw.split("#", 1)[0])]
        if not words:
            continue
        if len(words) > 1:
            raise Where(source, lineno, words[1][1]).error(
                f"unexpected {words[1][0]!r}: a PBS nodefile has one host name per line",
                "write the host once per process, one per line",
            )
        name = check_name(words[0][0], Where(source, lineno, words[0][1]))
        slots[name] = slots.get(name, 0) + 1
    if not slots:
        raise Where(source).error("no hosts found", "write one host name per process per line")
    hosts = tuple(Host(name=n, slots=s) for n, s in slots.items())
    return Inventory(hosts=hosts, source=source, format="pbs")


def parse_slurm_env(nodelist: str, tasks_per_node: str, source: str = "SLURM") -> Inventory:
    """``SLURM_JOB_NODELIST`` plus ``SLURM_TASKS_PER_NODE`` (``2(x3),1``) -> Inventory."""
    hosts = parse_host_spec(nodelist, source=f"{source}_JOB_NODELIST").hosts
    counts: list[int] = []
    where = Where(f"{source}_TASKS_PER_NODE", 1, 1)
    for part, offset in split_items(tasks_per_node):
        m = re.fullmatch(r"\s*(\d{1,6})(?:\(x(\d{1,6})\))?\s*", part)
        if m is None:
            raise where.at(1, offset + 1).error(
                f"cannot read {part!r}", "SLURM_TASKS_PER_NODE looks like '4(x2),2'"
            )
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(counts) != len(hosts):
        raise where.error(
            f"{len(counts)} task counts for {len(hosts)} nodes",
            "run inside a Slurm allocation, or pass --hosts instead",
        )
    checked = tuple(
        h.with_slots(parse_count(str(c), "slots", where))
        for h, c in zip(hosts, counts, strict=True)
    )
    return Inventory(hosts=checked, source=source, format="slurm")
