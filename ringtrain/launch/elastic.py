"""Supervision under ``--elastic``: a lost rank is an incident Horovod absorbs, not a fault.

Horovod's elastic driver (horovodrun, ``hvd.elastic.run``) keeps the surviving ranks' processes
when a rank or a host is lost: they roll back to their last in-memory commit, form a smaller
ring and go on, and the host that failed sits out a cooldown. So under ``--elastic`` ringtrain
does not tear the job down for a rank that ended early, went silent or lost its host
(supervise.check skips those); it names each as it happens and records it, with the time the
job was training again (the first progress report after it), on the attempt's JobResult.
What still ends the job: horovodrun's own exit (fewer than --min-np slots for
--elastic-timeout, or the script failing everywhere), a stall, and a job that never formed.

``lost`` is pure: a snapshot in, the ranks lost in it. ``ElasticWatch`` keeps what was seen
across supervision ticks (as straggler.StragglerWatch does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ringtrain.hostfile import Allocation
from ringtrain.launch.control import Snapshot

if TYPE_CHECKING:
    from ringtrain.launch.sparekeeper import SpareKeeper


@dataclass(frozen=True, slots=True)
class Absorbed:
    """A rank lost under --elastic: when, and when the job was training again after it."""

    rank: int
    host: str
    why: str
    at: float  # seconds into the attempt
    training_again: float | None = None  # ditto

    @property
    def ttta_s(self) -> float | None:
        return None if self.training_again is None else self.training_again - self.at

    def describe(self) -> str:
        back = (f"; training again {self.ttta_s:.1f} s later" if self.ttta_s is not None
                else "; no training progress reported after it")
        return f"rank {self.rank} on {self.host} {self.why}{back}"

    def to_json(self) -> dict[str, Any]:
        ttta = self.ttta_s
        return {"rank": self.rank, "host": self.host, "why": self.why, "at_s": round(self.at, 3),
                "ttta_s": None if ttta is None else round(ttta, 3)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Absorbed:
        ttta = d.get("ttta_s")
        at = float(d["at_s"])
        return cls(int(d["rank"]), str(d["host"]), str(d["why"]), at,
                   None if ttta is None else at + float(ttta))


def lost(snap: Snapshot, where: Mapping[int, str], heartbeat_timeout: float,
         known: frozenset[int], started: float = 0.0) -> tuple[Absorbed, ...]:
    """Ranks not in ``known`` that are gone: their connection closed before they said their
    script returned (killed, crashed, host down), or silent past the heartbeat timeout. Pure."""
    out = []
    for r in snap.ranks:
        if r.rank in known or r.done:
            continue
        if not r.connected:
            why = "ended before its script returned (killed or crashed)"
        elif r.forming_since is None and snap.now - r.last_heard > heartbeat_timeout:
            why = f"silent for {snap.now - r.last_heard:.0f} s (stopped, or its host lost)"
        else:
            continue
        # the host the rank itself reported: Horovod's elastic driver places ranks in its own
        # order (it reads the discovery script's lines into a set), not the allocation's
        out.append(Absorbed(r.rank, r.host or where.get(r.rank, "?"), why, snap.now - started))
    return tuple(out)


class ElasticWatch:
    """The ranks lost so far, each named once through ``note``, and the first progress
    report after each (the job training again)."""

    def __init__(self, where: Mapping[int, str], heartbeat_timeout: float,
                 started: float, keeper: SpareKeeper | None = None) -> None:
        self.where, self.timeout, self.started = dict(where), heartbeat_timeout, started
        self.incidents: list[Absorbed] = []
        self.keeper = keeper  # the discovery list: a lost host out, a spare in (spares.py)

    def tick(self, snap: Snapshot, note: Callable[[str], None]) -> None:
        known = frozenset(i.rank for i in self.incidents)
        for loss in lost(snap, self.where, self.timeout, known, self.started):
            note(f"elastic: rank {loss.rank} on {loss.host} {loss.why}; Horovod's elastic "
                 "driver goes on with the others from their last commit")
            self.incidents.append(loss)
            if self.keeper is not None:
                self.keeper.lost(loss.host)
        if self.keeper is not None:
            self.keeper.tick()
        if snap.progress is None:
            return
        at = snap.progress.at - self.started
        for i, loss in enumerate(self.incidents):
            if loss.training_again is None and at > loss.at:
                self.incidents[i] = replace(loss, training_again=at)
                note(f"elastic: training again {at - loss.at:.1f} s after rank {loss.rank} "
                     "was lost")


def seen_hosts(alloc: Allocation, snap: Snapshot, elastic: bool) -> dict[int, str]:
    """Each rank's host: the allocation's; under --elastic the rank's own (Horovod places
    ranks itself, and spares join). Pure."""
    where = {r.rank: r.host for r in alloc.ranks}
    return where | ({r.rank: r.host for r in snap.ranks if r.host} if elastic else {})
