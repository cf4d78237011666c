"""Under ``--elastic``, the hosts ringtrain offers Horovod: active ones, spares, and hosts
sitting out a cooldown. PURE: ``sparekeeper.SpareKeeper`` is the loop side.

Horovod's elastic driver uses every slot its discovery script prints, up to ``--max-np``. So
ringtrain prints only the active hosts and holds spares back (``--spares N``: the last N hosts
the pre-flight passed, or hosts labelled ``spare: true``). When a rank is lost, its host leaves
the list and sits out a cooldown that doubles with each failure (from the low end of
``--blacklist-cooldown-range`` up to its high end, as Horovod's own blacklist does), and the
first spare takes its place: Horovod starts a rank there, the others take it in at their next
commit, and the world size holds. When the cooldown ends the host is checked again (it answers
and its GPUs are free) and comes back as a spare, or straight into the list while the job runs
short of its size; a host that fails the check sits out again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ringtrain.errors import UsageError
from ringtrain.hostfile import Host, Inventory
from ringtrain.spec import ElasticPolicy

SPARE_LABEL = "spare"
_YES = ("true", "yes", "1")

Slots = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Resting:
    name: str
    slots: int
    until: float  # monotonic seconds
    failures: int


@dataclass(frozen=True, slots=True)
class Pool:
    active: Slots  # what the discovery script prints, in this order
    spares: Slots = ()
    resting: tuple[Resting, ...] = ()
    target: int = 0  # the active slots the job was placed with: the size to hold
    failures: tuple[tuple[str, int], ...] = ()  # per host, across cooldowns

    def text(self) -> str:
        """The discovery script's output: host:slots lines."""
        return "".join(f"{name}:{slots}\n" for name, slots in self.active)

    def failures_of(self, name: str) -> int:
        return dict(self.failures).get(name, 0)


def is_spare(host: Host) -> bool:
    return (host.label(SPARE_LABEL) or "").lower() in _YES


def split(hosts: Sequence[Host], spares: int) -> tuple[tuple[Host, ...], tuple[Host, ...]]:
    """(active, spare) hosts: those labelled ``spare: true``, else the last ``spares`` of the
    pre-flight's list. Pure."""
    labelled = tuple(h for h in hosts if is_spare(h))
    held = labelled or (tuple(hosts[len(hosts) - spares:]) if spares else ())
    active = tuple(h for h in hosts if h not in held)
    if held and not active:
        raise UsageError(f"--spares: all {len(hosts)} host(s) would be spares, none would train",
                         "pass fewer --spares, or label fewer hosts spare")
    return active, held


def pool_of(active: Sequence[Host], spares: Sequence[Host]) -> Pool:
    slots = tuple((h.name, h.slots) for h in active)
    return Pool(slots, tuple((h.name, h.slots) for h in spares),
                target=sum(s for _, s in slots))


def cooldown(failures: int, low: int, high: int) -> float:
    """Seconds a host sits out after its ``failures``-th failure: doubling from ``low``,
    at most ``high``. Pure."""
    return float(min(low * 2 ** max(failures - 1, 0), max(low, high)))


def lose(pool: Pool, name: str, now: float, cooldown_range: tuple[int, int]
         ) -> tuple[Pool, str | None]:
    """``name`` lost a rank: it leaves the list for its cooldown, and the first spare takes its
    place. Returns the pool and what to say (None: the host was not in the list). Pure."""
    slots = dict(pool.active).get(name)
    if slots is None:
        return pool, None
    failures = pool.failures_of(name) + 1
    rest = cooldown(failures, *cooldown_range)
    active = tuple(a for a in pool.active if a[0] != name)
    spares = pool.spares
    if spares:
        active, spares = (*active, spares[0]), spares[1:]
        said = f"{pool.spares[0][0]} (a spare) takes {name}'s place"
    else:
        said = f"no spare left: the job goes on without {name}"
    counts = dict(pool.failures) | {name: failures}
    new = replace(pool, active=active, spares=spares,
                  resting=(*pool.resting, Resting(name, slots, now + rest, failures)),
                  failures=tuple(sorted(counts.items())))
    return new, f"elastic: {said}; {name} sits out {rest:.0f} s (failure {failures})"


def due(pool: Pool, now: float) -> tuple[str, ...]:
    """Hosts whose cooldown has ended: to be checked again. Pure."""
    return tuple(r.name for r in pool.resting if r.until <= now)


def short(pool: Pool) -> bool:
    """Whether the job runs short of its slots: a host readmitted now joins it. Pure."""
    return sum(s for _, s in pool.active) < pool.target


def joining(pool: Pool, passed: Sequence[str]) -> tuple[str, ...]:
    """Of the rested hosts that passed their check (readmitted in this order), those that go
    into the list, as ``readmit`` decides: while the job is short of its size; the others come
    back as spares. Pure."""
    have = sum(s for _, s in pool.active)
    slots = {r.name: r.slots for r in pool.resting}
    out = []
    for name in passed:
        if have < pool.target:
            out.append(name)
            have += slots.get(name, 0)
    return tuple(out)


def readmit(pool: Pool, name: str, ok: bool, now: float, cooldown_range: tuple[int, int],
            why: str = "") -> tuple[Pool, str]:
    """After ``name``'s check: back as a spare (into the list while the job runs short), or
    another cooldown. Pure."""
    (was,) = [r for r in pool.resting if r.name == name]
    resting = tuple(r for r in pool.resting if r.name != name)
    if not ok:
        failures = was.failures + 1
        rest = cooldown(failures, *cooldown_range)
        counts = dict(pool.failures) | {name: failures}
        return (replace(pool, resting=(*resting, replace(was, until=now + rest,
                                                         failures=failures)),
                        failures=tuple(sorted(counts.items()))),
                f"elastic: {name} failed its check ({why or 'no answer'}); it sits out "
                f"{rest:.0f} s more")
    if short(pool):
        return (replace(pool, active=(*pool.active, (name, was.slots)), resting=resting),
                f"elastic: {name} passed its check and joins again (the job is short of "
                f"{pool.target} slots)")
    return (replace(pool, spares=(*pool.spares, (name, was.slots)), resting=resting),
            f"elastic: {name} passed its check; it is a spare again")


def without_spares(inventory: Inventory, el: ElasticPolicy | None) -> Inventory:
    """The hosts the job is placed on: all but the spares (``--elastic`` only). Pure."""
    if el is None:
        return inventory
    active, _ = split(inventory.hosts, el.spares)
    return replace(inventory, hosts=active)
