"""Rank allocation: inventory + probe results + np + policy -> ranks on hosts, in ring order. Pure.

Ranks fill hosts in ring order, each host up to its slots, like Open MPI's ``--map-by slot``:
consecutive ranks share a host, so the ring crosses the network once per host boundary. As in
mpirun, the launching machine (``localhost``) comes first wherever the inventory lists it, and a
host with 0 slots (``-H localhost:0``) gets no rank.

Why ring order matters. Ring all-reduce (Horovod's and NCCL's) arranges the N ranks in a
cycle; in each of its 2(N-1) steps *every* rank sends a 1/N chunk to its successor at the same
time, so a step lasts as long as the slowest link of the cycle. Links between hosts in one rack
go through the top-of-rack switch at full speed; links that leave the rack share the rack's
(usually oversubscribed) uplink to the spine. If the ring visits racks in an arbitrary order, up
to N links cross rack boundaries at once and split that uplink between them; if hosts are grouped
by rack, exactly one link leaves and one enters each rack, so the cross-rack hop runs at full
uplink speed and the whole ring gets close to its bandwidth bound. ``AllocationPolicy.ring_label``
names the label that marks such a group (``rack``, ``switch``, ``pod``); allocation then orders
hosts group by group and, when not every slot is needed, uses as few groups as possible.
``Allocation.ring_crossings`` counts the group boundaries the ring crosses (the wrap-around from
the last rank back to rank 0 included).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from ringtrain.errors import AllocationError
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.hostfile.nodeset import HostListError, HostPattern, parse_pattern

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RankAssignment:
    rank: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host: str


@dataclass(frozen=True, slots=True)
class AllocationPolicy:
    """What the user asked for beyond -np. Patterns are fnmatch globs or host lists."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    slot_overrides: tuple[tuple[str, int], ...] = ()
    min_hosts: int = 1
    ring_label: str | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """The hosts actually used, each with ``slots`` = ranks placed on it, in ring order.

    ``dropped`` lists hosts of the inventory that got no ranks and why.
    """

    hosts: tuple[Host, ...]
    ranks: tuple[RankAssignment, ...]
    dropped: tuple[tuple[str, str], ...] = ()
    ring_label: str | None = None

    @property
    def np(self) -> int:
        return len(self.ranks)

    @property
    def is_local_only(self) -> bool:
        return all(h.is_local for h in self.hosts)

    def ranks_on(self, host: str) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.host == host)

    def ranks_by_host(self) -> dict[str, tuple[int, ...]]:
        """host -> its ranks, in one pass (ranks_on per host would be quadratic)."""
        out: dict[str, list[int]] = {h.name: [] for h in self.hosts}
        for r in self.ranks:
            out.setdefault(r.host, []).append(r.rank)
        return {h: tuple(ranks) for h, ranks in out.items()}

    @property
    def busiest(self) -> int:
        """The most ranks one host runs (0 without ranks)."""
        return max((len(r) for r in self.ranks_by_host().values()), default=0)

    @property
    def ring_crossings(self) -> int:
        """How many ring links join hosts with different ``ring_label`` values (0 without one)."""
        if self.ring_label is None or len(self.hosts) < 2:
            return 0
        values = [h.label(self.ring_label) for h in self.hosts]
        return sum(a != b for a, b in zip(values, values[1:] + values[:1], strict=True))


def allocate(
    inventory: Inventory,
    np: int | None = None,
    *,
    policy: AllocationPolicy | None = None,
) -> Allocation:
    """Place ``np`` ranks (default: every slot) on the inventory's hosts in ring order. The
    pre-flight's verdict has already capped each host to the slots its probe found usable."""
    policy = policy or AllocationPolicy()
    if policy.min_hosts < 1:
        raise AllocationError(
            f"--min-hosts must be at least 1, got {policy.min_hosts}", "pass --min-hosts 1 or more"
        )
    hosts, dropped = _candidates(inventory, policy)
    total = sum(h.slots for h in hosts)
    want = total if np is None else np
    if want <= 0:
        raise AllocationError(f"-np must be at least 1, got {want}", "pass -np 1 or more")
    if want > total:
        raise AllocationError(
            f"asked for {want} ranks, {total} slots left in {inventory.source}"
            + _why([f"{h} {why}" for h, why in dropped]),
            f"pass -np {total} or fewer, or add hosts" if total
            else "include or fix hosts so some slots remain",
        )
    if len(hosts) < policy.min_hosts:
        raise AllocationError(
            f"only {len(hosts)} host(s) usable, --min-hosts is {policy.min_hosts}"
            + _why([f"{h} {why}" for h, why in dropped]),
            "fix or add hosts, or pass a smaller --min-hosts",
        )
    used = _fill(_local_first(_ring_order(hosts, policy.ring_label, want)), want)
    if len(used) < policy.min_hosts:
        raise AllocationError(
            f"{want} ranks fill only {len(used)} host(s), --min-hosts is {policy.min_hosts}",
            "pass a larger -np (or lower --slots per host), or a smaller --min-hosts",
        )
    names = {u.name for u in used}
    dropped += [(h.name, f"not needed for {want} ranks") for h in hosts if h.name not in names]
    return Allocation(
        hosts=tuple(used), ranks=_assign_ranks(tuple(used)), dropped=tuple(dropped),
        ring_label=policy.ring_label,
    )


def select(inventory: Inventory, policy: AllocationPolicy) -> Inventory:
    """The inventory after --include/--exclude and --slots overrides: the hosts a launch may
    probe and use. Follow with ``allocate(selected, np, policy=placement_only(policy))``."""
    hosts, dropped = _candidates(inventory, policy)
    if not hosts:
        raise AllocationError(
            f"no host of {inventory.source} is left" + _why([f"{h} {why}" for h, why in dropped]),
            "loosen --include / --exclude",
        )
    return replace(inventory, hosts=tuple(hosts))


def placement_only(policy: AllocationPolicy) -> AllocationPolicy:
    """``policy`` without the host selection that ``select`` already applied."""
    return replace(policy, include=(), exclude=(), slot_overrides=())


def _why(reasons: list[str]) -> str:
    if not reasons:
        return ""
    more = f"; and {len(reasons) - 6} more" if len(reasons) > 6 else ""
    return " (" + "; ".join(reasons[:6]) + more + ")"


# DeepSpeed's --include/--exclude: worker-0@worker-1:0,2 (hosts joined by @, GPU indices)
_DEEPSPEED_SPEC = re.compile(r"[^@:]+(:\d+(,\d+)*)?(@[^@:]+(:\d+(,\d+)*)?)*")


def _patterns(texts: tuple[str, ...], flag: str, inventory: Inventory) -> list[HostPattern]:
    patterns = []
    for text in texts:
        try:
            pattern = parse_pattern(text)
        except HostListError as err:
            raise AllocationError(
                f"{flag} {text!r}: {err}", "use globs (gpu0*) or host lists (gpu[01-04,07])"
            ) from None
        if not any(pattern.matches(h.name) for h in inventory.hosts):
            names = ", ".join(inventory.names[:8]) + (", ..." if len(inventory.names) > 8 else "")
            if flag != "--slots" and ("@" in text or ":" in text) and (
                    _DEEPSPEED_SPEC.fullmatch(text)):
                raise AllocationError(
                    f"{flag} {text!r} is DeepSpeed's NODE_SPEC (host@host:slot,...), which "
                    "ringtrain does not read", f"pass one host glob or list a flag ({flag} "
                    f"gpu01 {flag} gpu02); ringtrain picks the slots itself. Hosts: {names}")
            raise AllocationError(
                f"{flag} {text!r} matches no host in {inventory.source}",
                f"check the spelling; hosts are: {names}",
            )
        patterns.append(pattern)
    return patterns


def _candidates(
    inventory: Inventory, policy: AllocationPolicy
) -> tuple[list[Host], list[tuple[str, str]]]:
    """Hosts left after include/exclude and slot overrides, and those dropped with why."""
    include = _patterns(policy.include, "--include", inventory)
    exclude = _patterns(policy.exclude, "--exclude", inventory)
    override_patterns = _patterns(tuple(t for t, _ in policy.slot_overrides), "--slots", inventory)
    overrides = [(p, n) for p, (_, n) in zip(override_patterns, policy.slot_overrides, strict=True)]
    kept: list[Host] = []
    dropped: list[tuple[str, str]] = []
    for host in inventory.hosts:
        if include and not any(p.matches(host.name) for p in include):
            dropped.append((host.name, f"not matched by --include ({host.slots} slots)"))
        elif any(p.matches(host.name) for p in exclude):
            dropped.append((host.name, f"excluded by --exclude ({host.slots} slots)"))
        elif (host := _override(host, overrides)).slots == 0:
            dropped.append((host.name, "has 0 slots (no rank, as horovodrun gives it none)"))
        else:
            kept.append(host)
    return kept, dropped


def _override(host: Host, overrides: list[tuple[HostPattern, int]]) -> Host:
    for pattern, slots in overrides:
        if not pattern.matches(host.name):
            continue
        if slots < 1:
            raise AllocationError(f"--slots {pattern.text}={slots}: slots must be at least 1",
                                  f"use --exclude {pattern.text} to leave hosts out")
        if host.max_slots is not None and slots > host.max_slots:
            raise AllocationError(
                f"--slots {pattern.text}={slots} exceeds {host.name}'s max_slots={host.max_slots}",
                f"pass --slots {pattern.text}={host.max_slots} or less, or raise max_slots",
            )
        host = host.with_slots(slots)
    return host


def _ring_order(hosts: list[Host], label: str | None, want: int) -> list[Host]:
    """Hosts grouped by ``label``; when ``want`` needs fewer slots, the fewest groups first."""
    if label is None:
        return hosts
    groups: dict[str | None, list[Host]] = {}
    for host in hosts:
        groups.setdefault(host.label(label), []).append(host)
    if list(groups) == [None]:
        raise AllocationError(
            f"no host has the ring label {label!r}",
            f"add labels {{{label}: ...}} to the inventory, or drop --ring-label",
        )
    unlabelled = [h.name for h in groups.get(None, [])]
    if unlabelled:
        log.warning("hosts without label %r go last in the ring: %s", label, ", ".join(unlabelled))
    order = [g for g in groups if g is not None] + ([None] if None in groups else [])
    by_size = sorted(order, key=lambda g: -sum(h.slots for h in groups[g]))
    chosen: list[str | None] = []
    for group in by_size:
        if sum(h.slots for g in chosen for h in groups[g]) >= want:
            break
        chosen.append(group)
    # Keep inventory order among the chosen groups; every chosen group still gets ranks.
    picked = [g for g in order if g in chosen]
    return [h for g in picked for h in groups[g]] + [
        h for g in order if g not in chosen for h in groups[g]
    ]


def _local_first(hosts: list[Host]) -> list[Host]:
    """The launching machine first: mpirun maps its own node before every other, wherever the
    hostfile lists it (Open MPI 4.1, checked by tests/integration/test_inventory_oracles.py).
    Only its local names are known here (localhost, 127.0.0.1, ::1), not its own host name."""
    return [h for h in hosts if h.is_local] + [h for h in hosts if not h.is_local]


def _fill(hosts: list[Host], want: int) -> list[Host]:
    used: list[Host] = []
    left = want
    for host in hosts:
        if left == 0:
            break
        take = min(host.slots, left)
        used.append(host.with_slots(take))
        left -= take
    return used


def with_extra_slots(alloc: Allocation, extra: dict[str, int],
                     appended: tuple[Host, ...] = ()) -> Allocation:
    """The same hosts in the same order, each with ``extra[name]`` more ranks, then the
    ``appended`` hosts, renumbered as ``--map-by slot`` numbers them (a TF parameter-server
    job's chief and ps tasks)."""
    hosts = tuple(h.with_slots(h.slots + extra.get(h.name, 0)) for h in alloc.hosts) + appended
    return replace(alloc, hosts=hosts, ranks=_assign_ranks(hosts))


def _assign_ranks(hosts: tuple[Host, ...]) -> tuple[RankAssignment, ...]:
    """Horovod's rank math: cross_rank/cross_size count the hosts that have this local_rank."""
    cross_size = [0] * max((h.slots for h in hosts), default=0)
    for host in hosts:
        for local_rank in range(host.slots):
            cross_size[local_rank] += 1
    seen = [0] * len(cross_size)
    ranks: list[RankAssignment] = []
    for host in hosts:
        for local_rank in range(host.slots):
            ranks.append(
                RankAssignment(
                    rank=len(ranks),
                    local_rank=local_rank,
                    local_size=host.slots,
                    cross_rank=seen[local_rank],
                    cross_size=cross_size[local_rank],
                    host=host.name,
                )
            )
            seen[local_rank] += 1
    return tuple(ranks)
