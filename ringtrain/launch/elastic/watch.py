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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ringtrain.hostfile import Allocation, Host
from ringtrain.launch.record.absorbed import Absorbed, restored_text
from ringtrain.launch.record.snapshot import Restored, Snapshot

if TYPE_CHECKING:
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper
    from ringtrain.spec import ElasticPolicy


RESET_LEAD_S = 5.0


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


def host_lives(snap: Snapshot, loss: Absorbed, known: frozenset[int]) -> bool:
    """Another rank on the lost rank's host is still connected and heard within the
    heartbeat timeout's reach: the host is alive, only that process died (its slot is refilled
    by ringtrain's driver rule, hvd_driver.py). A silent rank's host is never alive. Pure."""
    if loss.silent:
        return False
    return any(r.rank != loss.rank and r.rank not in known and r.host == loss.host
               and r.connected and not r.done for r in snap.ranks)


class ElasticWatch:
    """The ranks lost so far, each named once through ``note``, and the first progress
    report after each (the job training again)."""

    def __init__(self, where: Mapping[int, str], heartbeat_timeout: float,
                 started: float, keeper: SpareKeeper | None = None,
                 abort: Callable[[int], int] | None = None,
                 cut: Callable[[str], int] | None = None) -> None:
        self.where, self.timeout, self.started = dict(where), heartbeat_timeout, started
        self.incidents: list[Absorbed] = []
        self.keeper = keeper  # the discovery list: a lost host out, a spare in (spares.py)
        # the control server's abort_ring: the lost rank's ring fails now on every survivor
        self.abort = abort
        # driverssh.cut for this job: Horovod's driver hears of a silent host now, not when
        # its ssh session to it times out
        self.cut = cut

    def spare_hosts(self, placed: Sequence[Host]) -> tuple[Host, ...]:
        """The hosts beyond the placement the job may have used (spares, and their warm
        processes): the teardown reaps them too."""
        names = {h.name for h in placed}
        return () if self.keeper is None else tuple(
            h for h in self.keeper.hosts if h.name not in names)

    def tick(self, snap: Snapshot, note: Callable[[str], None]) -> None:
        known = frozenset(i.rank for i in self.incidents)
        for loss in lost(snap, self.where, self.timeout, known, self.started):
            told = self.abort(loss.rank) if self.abort is not None else 0
            now = (f"; {told} survivor(s) told to abort that ring now, not after Gloo's "
                   "timeout" if told else "")
            if loss.silent and self.cut is not None and self.cut(loss.host):
                now += f"; Horovod's ssh to {loss.host} ended, so its driver re-forms now"
            alive = host_lives(snap, loss, known)
            then = (f"{loss.host}'s other ranks live, so the host stays and a new process "
                    "starts in its slot (ringtrain/hvd_driver.py)" if alive else
                    "Horovod's elastic driver goes on with the others")
            note(f"elastic: rank {loss.rank} on {loss.host} {loss.why}; {then}, from their "
                 f"last commit{now}")
            self.incidents.append(loss)
            if self.keeper is not None and not alive:
                self.keeper.lost(loss.host)
        if self.keeper is not None:
            self.keeper.tick()
        self._stages(snap, note)
        if snap.progress is None:
            return
        at = snap.progress.at - self.started
        # progress from the new world: after a ring formed since the loss (a survivor's last
        # batches of the old world can report after the loss is named); where no rank ever
        # reports its ring (no hvd.init seen), after the loss
        rings = any(r.ring > 0 for r in snap.ranks)
        for i, loss in enumerate(self.incidents):
            since = loss.formed if rings else loss.at
            if loss.training_again is None and since is not None and at > since:
                self.incidents[i] = replace(loss, training_again=at)
                # the survivors can be faster than the tick that names the loss: 0.0 s then
                note(f"elastic: training again {max(0.0, at - loss.at):.1f} s after rank "
                     f"{loss.rank} was lost")
                if self.keeper is not None:
                    self.keeper.release()  # the spare joins at the next commit

    def _stages(self, snap: Snapshot, note: Callable[[str], None]) -> None:
        """Each loss's reset and restore, named once. A survivor's collective can fail before
        the launcher sees the lost rank's connection close, so a reset up to RESET_LEAD_S
        before the loss counts (a negative stage), unless an earlier incident took it."""
        resets = [t - self.started for t in snap.resets]
        formed = sorted(r.ring_at - self.started for r in snap.ranks if r.ring > 0)
        restores = [(r.at - self.started, r) for r in snap.restores]
        taken = -1.0e18
        for i, loss in enumerate(self.incidents):
            first = next((t for t in resets if t >= loss.at - RESET_LEAD_S and t > taken),
                         None)
            taken = max(taken, loss.reset if loss.reset is not None else first or taken)
            if loss.reset is None and first is not None:
                self.incidents[i] = replace(loss, reset=first)
            # the new world: after the loss, or after the survivors' reset for it when that
            # came first (a lone survivor's ring of one can form and restore before the
            # launcher names the loss; its training again then released a held spare only
            # at SPARE_DELAY_S)
            reset = self.incidents[i].reset
            since = loss.at if reset is None else min(loss.at, reset)
            if self.incidents[i].formed is None:  # a rank's later ring, formed after that
                ring = next((t for t in formed if t > since), None)
                if ring is not None:
                    self.incidents[i] = replace(self.incidents[i], formed=ring)
            if self.incidents[i].restored is None:
                found: tuple[float, Restored] | None = next(
                    ((t, r) for t, r in restores if t >= since), None)
                if found is not None:
                    text = restored_text(found[1])
                    self.incidents[i] = replace(self.incidents[i], restored=found[0],
                                                restored_from=text)
                    note(f"elastic: state restored from {text} {found[0] - loss.at:.1f} s "
                         f"after rank {loss.rank} was lost")


def elastic_world(alloc: Allocation, policy: ElasticPolicy | None) -> int | None:
    """--elastic: the most ranks the job may run (horovodrun's --max-np: ``elastic_args``); None
    without --elastic. Pure."""
    return max(alloc.np, policy.max_np or 0) if policy is not None else None


def seen_hosts(alloc: Allocation, snap: Snapshot, elastic: bool) -> dict[int, str]:
    """Each rank's host: the allocation's; under --elastic the rank's own (Horovod places
    ranks itself, and spares join). Pure."""
    where = {r.rank: r.host for r in alloc.ranks}
    return where | ({r.rank: r.host for r in snap.ranks if r.host} if elastic else {})
