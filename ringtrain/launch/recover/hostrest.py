"""Which hosts an attempt may use after earlier failures. PURE.

``HostRest`` is the launch's memory of failed hosts, as a value replaced after every
decision: hosts ``excluded`` (lost, never started, a straggler restarted without) sit out a
cooldown; hosts ``suspected`` (a rank there was killed by a signal that was not ringtrain's,
e.g. the OOM killer) are avoided while the others suffice. ``choose`` applies it to the
selected inventory; ``check_floor`` refuses a restart that cannot reach its size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringtrain.errors import AllocationError
from ringtrain.hostfile import Inventory
from ringtrain.launch.recover.outcome import Decision


@dataclass(frozen=True, slots=True)
class HostRest:
    excluded: tuple[tuple[str, float], ...] = ()  # (host, until), monotonic clock
    suspected: tuple[tuple[str, float], ...] = ()

    def after(self, decision: Decision, now: float, cooldown_s: float) -> HostRest:
        """The rest after ``decision``: its hosts sit out until ``now + cooldown_s``."""
        until = now + cooldown_s
        return HostRest(
            _merge(self.excluded, decision.exclude, until),
            _merge(self.suspected, decision.suspect, until),
        )

    def excluding(self, hosts: tuple[str, ...], now: float, cooldown_s: float) -> HostRest:
        """The rest with ``hosts`` sitting out too, until ``now + cooldown_s``."""
        return replace(self, excluded=_merge(self.excluded, hosts, now + cooldown_s))

    def resting(self, now: float) -> frozenset[str]:
        return frozenset(h for h, until in self.excluded if until > now)

    def suspects(self, now: float) -> frozenset[str]:
        return frozenset(h for h, until in self.suspected if until > now) - self.resting(now)

    @property
    def ever_excluded(self) -> frozenset[str]:
        return frozenset(h for h, _ in self.excluded)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The hosts an attempt may probe and place on, the ones left out, and the suspects kept
    because without them too few slots remained."""

    inventory: Inventory
    left_out: frozenset[str]
    kept_suspects: tuple[str, ...] = ()


def choose(selected: Inventory, rest: HostRest, now: float, floor: int | None) -> Candidates:
    """``selected`` less the resting hosts, and less the suspects when the others give at
    least ``floor`` slots; an AllocationError when nothing is left."""
    resting, suspected = rest.resting(now), rest.suspects(now)
    hosts = tuple(h for h in selected.hosts if h.name not in resting | suspected)
    kept: tuple[str, ...] = ()
    left_out = resting | suspected
    if suspected and (not hosts or (floor and sum(h.slots for h in hosts) < floor)):
        kept = tuple(sorted(suspected))
        hosts = tuple(h for h in selected.hosts if h.name not in resting)
        left_out = resting
    if not hosts:
        raise AllocationError("every host is excluded after failures", "fix the hosts and relaunch")
    return Candidates(replace(selected, hosts=hosts), left_out, kept)


def check_floor(slots: int, floor: int | None, left_out: frozenset[str] | set[str],
                from_min_np: bool) -> None:
    """Refuse a restart whose hosts give fewer than ``floor`` slots, naming who is out."""
    if floor is not None and slots < floor:
        left = f" after excluding {', '.join(sorted(left_out))}" if left_out else ""
        raise AllocationError(
            f"only {slots} slots left{left}; the restart needs {floor} "
            f"({'--min-np' if from_min_np else 'the first attempt'})",
            "fix or replace the excluded hosts, or allow a smaller job with --min-np",
        )


def _merge(old: tuple[tuple[str, float], ...], hosts: tuple[str, ...],
           until: float) -> tuple[tuple[str, float], ...]:
    merged = dict(old)
    for host in hosts:
        merged[host] = until
    return tuple(merged.items())
