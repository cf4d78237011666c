"""Which ring a rank aborts when another is lost (--elastic): the ring it formed, or the round
forming now. PURE: values in, the ring generation to name in ``abort`` out.

A rank lost while the ring forms again (its ``hvd.init`` running) dooms that round: every
survivor's Gloo set-up would wait one Gloo timeout (30 s by default) for it. The survivors
forming now are told at once (``ring_to_abort``). A process that joins the doomed round later
(a new process filling a slot for an earlier loss, whose init begins after this one) is told
as its init begins (``DoomedRound.joined``), once, when it started before the loss: the lost
rank's own replacement, started by Horovod's driver once it saw the loss, joins the next
round, which is without the lost rank, and is left alone (told, it cost that round a Gloo
timeout on the others: each of them waited for its first connection). A survivor whose init
failed and that begins again joins the next round too, and was told already. A ring formed
by any rank ends the doomed round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ringtrain.launch.record.snapshot import RankState

__all__ = ["DoomedRound", "joined", "ring_of", "ring_to_abort"]


def ring_to_abort(rank: RankState, gone: RankState | None) -> int | None:
    """The ring (hvd.init generation) ``rank`` is to abort now that ``gone`` is lost, or None.
    The ring it formed, when it formed it before ``gone``'s last word (a ring formed since is
    without it). The ring it is forming (its generation after its last), when ``gone`` was
    forming one too: a fault during the re-form. A survivor forming a ring after ``gone``
    died in the old one is left alone: that round is without it."""
    if rank.forming_ring:
        return rank.ring + 1 if gone is not None and gone.forming_ring else None
    last = gone.last_heard if gone is not None else float("inf")
    return rank.ring if rank.ring > 0 and rank.ring_at <= last else None


@dataclass
class DoomedRound:
    """A rank lost while the round formed: who was lost, and the processes told so far."""

    lost: int
    at: float  # when it was lost, in seconds since the epoch (the ranks' clocks)
    told: set[tuple[str, int]] = field(default_factory=set)  # (host, pid): pids repeat

    def joined(self, rank: RankState) -> int | None:
        """``rank`` said its init began: the forming ring to abort when this process started
        before the loss and was not told yet, else None. Marks it told."""
        who = (rank.host, rank.pid)
        if who in self.told or not rank.forming_ring or rank.started is None or (
                rank.started >= self.at):
            return None
        self.told.add(who)
        return rank.ring + 1


def joined(doomed: DoomedRound | None, rank: RankState,
           kind: str) -> tuple[DoomedRound | None, int | None]:
    """After ``rank``'s message of ``kind``: the doomed round (a formed ring ends it) and the
    ring to tell ``rank`` to abort (its init began in that round), or None."""
    if kind == "init":
        return None, None
    if kind != "init_begin" or doomed is None:
        return doomed, None
    return doomed, doomed.joined(rank)


def ring_of(msg: dict[str, Any], known: int) -> int:
    """The ring generation an ``init`` names (a count; anything else keeps ``known``)."""
    ring = msg.get("ring")
    return ring if isinstance(ring, int) and not isinstance(ring, bool) and ring > 0 else known
