"""Supervise a running job: detect failures and hangs in bounded time, tear down everything.

The pure part, ``check()``, reads a control-server Snapshot and says whether the job has a fault:

* start-up hang: after ``start_timeout`` not every rank has checked in, or some ranks finished
  ``hvd.init()`` while others did not: names the missing ranks and their hosts;
* host lost: every rank on a host has been silent for ``heartbeat_timeout`` (link down, host dead);
* one rank silent for ``heartbeat_timeout`` while its host answers (stopped, hung, agent dead);
* stall: progress was reported once and then not for ``stall_timeout``;
* TensorFlow's cluster not formed: a rank has waited in TensorFlow for the other tasks of its
  cluster for ``start_timeout``. While it waits TensorFlow holds its GIL, so its heartbeats
  stop: such a rank is never called silent, and its host is not judged lost meanwhile.

A rank that exits non-zero or by signal needs no check: mpirun (with ranks under mpi4py's runner)
ends the job and exits with that status within seconds.

``wait_or_fault()`` polls ``check()`` until the job ends or a fault shows. The teardown that
follows is teardown.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from ringtrain.hostfile import Allocation
from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.result import FailureKind
from ringtrain.launch.record.snapshot import RankState, Snapshot
from ringtrain.rank.events import HEARTBEAT_S
from ringtrain.spec import StragglerAction, SupervisionPolicy

log = logging.getLogger(__name__)
HOST_ANSWERS_S = 2 * HEARTBEAT_S  # a host whose newest beat is older is going quiet


class Watcher(Protocol):
    """A supervision check that keeps state across ticks: a new kind of watching is one more
    of these in the session's list, not a branch in its loop."""

    def tick(self, snap: Snapshot, note: Callable[[str], None]) -> Fault | None: ...


def check(
    snap: Snapshot, alloc: Allocation, policy: SupervisionPolicy, started: float,
    elastic: bool = False,
) -> Fault | None:
    """The first fault the snapshot shows, or None. Pure. Under ``--elastic`` a lost or
    silent rank is Horovod's to absorb (launch/elastic/watch.py): only a job that never formed and
    a stall are faults."""
    where = rank_hosts(alloc)
    if elastic:
        return _elastic_check(snap, alloc, where, policy, started)
    return (
        _lost_host(snap, where, policy)
        or _silent_rank(snap, where, policy)
        or _start_hang(snap, alloc, where, policy, started)
        or _forming_hang(snap, where, policy)
        or _stall(snap, policy)
        or _exit_hang(snap, alloc, policy)
    )


def _elastic_check(snap: Snapshot, alloc: Allocation, where: Mapping[int, str],
                   policy: SupervisionPolicy, started: float) -> Fault | None:
    """Under --elastic: a job that never formed (no host named: Horovod places ranks in its
    own order), then a stall or an exit hang judged over the ranks not lost."""
    if not any(r.initialized for r in snap.ranks):
        hang = _start_hang(snap, alloc, where, policy, started)
        return None if hang is None else replace(hang, hosts=())
    live = replace(snap, ranks=tuple(r for r in snap.ranks if r.connected or r.done))
    if live.ranks and all(r.done for r in live.ranks):
        last = max(r.done_at or 0.0 for r in live.ranks)
        if snap.now - last > policy.exit_grace:
            return Fault(FailureKind.EXIT_HANG,
                         f"every rank still in the job finished its script but the job had not "
                         f"exited {policy.exit_grace:.0f} s later; ringtrain ended it",
                         at=snap.now)
        return None
    return _stall(live, policy)


def live_done(snap: Snapshot) -> bool:
    """--elastic: every rank still in the job (not lost) said its script returned."""
    live = [r for r in snap.ranks if r.connected or r.done]
    return bool(live) and all(r.done for r in live)


def never_started(snap: Snapshot, alloc: Allocation,
                  tails: Mapping[int, Sequence[str]]) -> tuple[int, ...]:
    """Allocated ranks that neither checked in nor printed a line: they never ran (srun can
    fail to launch a step's tasks and still exit 0). A rank that cannot reach the launcher
    runs unsupervised and says so on its output, so it is not one of them. Pure."""
    seen = {r.rank for r in snap.ranks}
    return tuple(a.rank for a in alloc.ranks if a.rank not in seen and not tails.get(a.rank))


def all_done(snap: Snapshot, alloc: Allocation) -> bool:
    """Every allocated rank said its script returned (it may still be finalising)."""
    done = {r.rank for r in snap.ranks if r.done_at is not None}
    # fewer done than allocated: one is not (the usual case, without a look at each)
    return bool(alloc.ranks) and len(done) >= len(alloc.ranks) and all(
        a.rank in done for a in alloc.ranks)


def usage_warnings(
    snap: Snapshot, alloc: Allocation, policy: SupervisionPolicy, checkpoint_asked: bool,
    *, horovod: bool = True,
) -> tuple[str, ...]:
    """What the user asked for that could not take effect, from what the ranks said (``horovod``:
    the job is meant to be one Horovod job, not a TF strategy's tasks). Pure."""
    if not snap.ranks:
        return ()  # unsupervised (no rank checked in): nothing to say
    out = []
    if checkpoint_asked and not any("checkpoint" in r.api for r in snap.ranks):
        out.append(
            "--checkpoint was given but no rank used ringtrain's checkpoint API, so nothing "
            "was checkpointed there; add ringtrain.keras.resume(model) and "
            "ringtrain.keras.callbacks() to the script "
            "(docs/SCRIPTS.md: 'Your own training script')"
        )
    if policy.stall_timeout is not None and snap.progress is None:
        out.append(
            "--stall-timeout was given but no rank reported progress, so stalls could not be "
            "detected; add ringtrain.keras.callbacks() (model.fit) or ringtrain.keras.progress()"
        )
    straggler = policy.straggler
    if straggler.asked and straggler.action is not StragglerAction.OFF:
        if not any(r.steps is not None for r in snap.ranks):
            out.append(
                "--on-straggler was given but no rank reported its step times, so no straggler "
                "could be found; add ringtrain.keras.callbacks() (model.fit) or "
                "ringtrain.keras.step_time() (a custom loop)"
            )
        elif not any(r.steps is not None and r.steps.total_steps for r in snap.ranks):
            out.append(
                "--on-straggler was given but the ranks reported whole-step times only (the "
                "optimizer is not Horovod's DistributedOptimizer), which are equal on every "
                "rank of a synchronous job; report each rank's own part with "
                "ringtrain.keras.step_time(compute_s)"
            )
    if horovod and alloc.np > 1 and not any(r.init_begun for r in snap.ranks):
        out.append(
            f"no rank called hvd.init(): the {alloc.np} ranks ran as {alloc.np} independent "
            "copies of the script, not one Horovod job; call hvd.init() first thing"
        )
    return tuple(out)


def rank_hosts(alloc: Allocation) -> dict[int, str]:
    """rank -> the inventory name of its host. Ranks report their own hostname, which need not
    match the inventory (``localhost`` vs the machine's name). Built once per check: looking
    ranks up one by one would make every supervision tick quadratic in the rank count."""
    return {a.rank: a.host for a in alloc.ranks}


def arrivals(snap: Snapshot, alloc: Allocation, where: Mapping[int, str]) -> dict[str, int]:
    """host -> ranks that checked in, every allocated host listed (``where``: rank_hosts)."""
    arrived = {h.name: 0 for h in alloc.hosts}
    for r in snap.ranks:
        host = where.get(r.rank, "?")
        if host in arrived:
            arrived[host] += 1
    return arrived


def _lost_host(
    snap: Snapshot, where: Mapping[int, str], policy: SupervisionPolicy
) -> Fault | None:
    if not _stale(snap, policy):  # no rank silent that long: no host either (most ticks)
        return None
    by_host: dict[str, list[float]] = {}
    # a host with a rank waiting for its TensorFlow cluster cannot be judged by silence: that
    # rank's beats stop (TensorFlow holds the GIL), and it does not end itself meanwhile
    waiting = {where.get(r.rank, "?") for r in snap.ranks
               if r.connected and not r.done and r.forming_since is not None}
    for r in snap.ranks:
        # a rank whose script returned may be silent while the interpreter finalises
        if r.connected and not r.done and where.get(r.rank, "?") not in waiting:
            by_host.setdefault(where.get(r.rank, "?"), []).append(snap.now - r.last_heard)
    for host, silences in sorted(by_host.items()):
        if min(silences) > policy.heartbeat_timeout:
            ranks = tuple(
                r.rank
                for r in snap.ranks
                if where.get(r.rank) == host and r.connected and not r.done
            )
            return Fault(
                FailureKind.HOST_LOST,
                f"host {host} silent for {min(silences):.0f} s (ranks {_fmt(ranks)}): "
                "link down or host dead",
                (host,),
                ranks,
                snap.now,
            )
    return None


def _stale(snap: Snapshot, policy: SupervisionPolicy) -> list[RankState]:
    """The ranks still in the job silent past ``heartbeat_timeout``: one cheap look at each
    (80,000 ranks a tick: bench/launcher/control_scale.py), the time first."""
    cutoff = snap.now - policy.heartbeat_timeout
    return [r for r in snap.ranks
            if r.last_heard < cutoff and r.connected and r.done_at is None]


def _silent_rank(
    snap: Snapshot, where: Mapping[int, str], policy: SupervisionPolicy
) -> Fault | None:
    """One rank silent while its host answers (the others on it still beat): the process is
    stopped (SIGSTOP), hung holding the GIL, or its agent died. Named with host and PID."""
    silent = [r for r in _stale(snap, policy) if r.forming_since is None]
    if not silent:
        return None
    # "Its host answers": another rank there was heard within two beats. A host that is going
    # quiet is a lost host a beat later (its ranks' beats are up to a second apart, so the
    # first of them passes the timeout before the last does: bench/launcher/control_scale.py named a
    # lost host's rank as silent before this).
    fresh: dict[str, float] = {}
    for o in snap.ranks:
        if o.connected and not o.done and o.forming_since is None:
            h = where.get(o.rank, "?")
            fresh[h] = max(fresh.get(h, 0.0), o.last_heard)
    answering = [
        r for r in silent
        if snap.now - fresh.get(where.get(r.rank, "?"), 0.0) <= HOST_ANSWERS_S
    ]
    if not answering:
        return None
    r = min(answering, key=lambda s: s.last_heard)
    host = where.get(r.rank, r.host)
    return Fault(
        FailureKind.RANK_SILENT,
        f"rank {r.rank} on {host} (pid {r.pid}) silent for {snap.now - r.last_heard:.0f} s "
        "while its host answers: stopped, hung holding the GIL, or its agent died",
        (host,),
        (r.rank,),
        snap.now,
    )


def _start_hang(
    snap: Snapshot,
    alloc: Allocation,
    where: Mapping[int, str],
    policy: SupervisionPolicy,
    started: float,
) -> Fault | None:
    if snap.now - started <= policy.start_timeout:
        return None
    seen = {r.rank for r in snap.ranks}
    missing = tuple(r.rank for r in alloc.ranks if r.rank not in seen)
    what = "have not started (no check-in)"
    if not missing and not [r for r in snap.ranks if not r.initialized and r.done_at is None]:
        return None  # every rank formed its ring (or finished): no start hang (most ticks)
    if not missing and any(r.init_begun for r in snap.ranks):
        # Horovod is in use. Ranks that never entered hvd.init() are the culprits; the others
        # are blocked inside it waiting for them.
        missing = tuple(r.rank for r in snap.ranks if not r.init_begun and not r.done)
        what = "have not reached hvd.init()"
        if not missing:
            missing = tuple(r.rank for r in snap.ranks if not r.initialized and not r.done)
            what = "are stuck inside hvd.init()"
    if not missing:
        return None
    hosts = tuple(sorted({where[r] for r in missing if r in where}))
    arrived = arrivals(snap, alloc, where)
    per_host = ", ".join(f"{h.name} {arrived[h.name]}/{h.slots}" for h in alloc.hosts)
    return Fault(
        FailureKind.START_TIMEOUT,
        f"after {policy.start_timeout:.0f} s, ranks {_fmt(missing)} on {', '.join(hosts)} {what} "
        f"(arrived per host: {per_host})",
        hosts,
        missing,
        snap.now,
    )


def _forming_hang(
    snap: Snapshot, where: Mapping[int, str], policy: SupervisionPolicy
) -> Fault | None:
    """A rank has waited ``start_timeout`` in TensorFlow for its cluster to form: some task
    it waits for never started its server or cannot be reached. The fault names the ranks
    not waiting (where, under MultiWorkerMirrored, the missing task is: their hosts are the
    ones a restart leaves out), or every waiting rank when all wait."""
    if not [r for r in snap.ranks if r.forming_since is not None]:
        return None  # no rank waits in TensorFlow (most ticks)
    live = [r for r in snap.ranks if r.connected and not r.done]
    waiting = [r for r in live if r.forming_since is not None]
    if not any(snap.now - (r.forming_since or snap.now) > policy.start_timeout for r in waiting):
        return None
    waiters = tuple(sorted(r.rank for r in waiting))
    others = tuple(sorted(r.rank for r in live if r.forming_since is None))
    ranks = others or waiters
    hosts = tuple(sorted({where.get(r, "?") for r in ranks}))
    return Fault(
        FailureKind.START_TIMEOUT,
        f"ranks {_fmt(waiters)} waited {policy.start_timeout:.0f} s in TensorFlow for the "
        "rest of their cluster, which never formed: "
        + (f"ranks {_fmt(others)} on {', '.join(hosts)} never joined it" if others else
           "every task is waiting, so one cannot reach another's address from TF_CONFIG"),
        hosts,
        ranks,
        snap.now,
    )


def _stall(snap: Snapshot, policy: SupervisionPolicy) -> Fault | None:
    if snap.progress is None or (snap.ranks and all(r.done for r in snap.ranks)):
        return None
    limit = policy.stall_limit
    idle = snap.now - snap.progress.at
    if idle <= limit:
        return None
    return Fault(
        FailureKind.STALL,
        f"no training progress for {idle:.0f} s (last: epoch {snap.progress.epoch}, "
        f"step {snap.progress.step})",
        at=snap.now,
    )


def _exit_hang(snap: Snapshot, alloc: Allocation, policy: SupervisionPolicy) -> Fault | None:
    """Every rank's script returned, yet the job has not ended for ``exit_grace``: training
    is complete, so ringtrain ends the job; the session reports it as a success."""
    if not all_done(snap, alloc):
        return None
    last = max(r.done_at or 0.0 for r in snap.ranks)
    if snap.now - last <= policy.exit_grace:
        return None
    return Fault(
        FailureKind.EXIT_HANG,
        f"every rank finished its script but the job had not exited {policy.exit_grace:.0f} s "
        "later (interpreter shutdown hanging); ringtrain ended it",
        at=snap.now,
    )


def _fmt(ranks: tuple[int, ...]) -> str:
    return ",".join(str(r) for r in ranks[:16]) + ("..." if len(ranks) > 16 else "")


def wait_or_fault(
    wait: Callable[[float], bool],
    control: ControlServer,
    alloc: Allocation,
    policy: SupervisionPolicy,
    started: float,
    on_tick: Callable[[Snapshot], None] | None = None,
    watchers: Sequence[Watcher] = (),
    note: Callable[[str], None] = lambda _text: None,
    elastic: bool = False,
) -> Fault | None:
    """Block until the job ends by itself (None) or a fault shows (the Fault).

    ``wait(seconds)`` returns True as soon as the job has ended (at most ``seconds`` later), so
    the end of a job is seen at once, and the checks run every ``policy.poll_s``. ``watchers``:
    the checks that keep state across ticks (stragglers, --elastic's losses, a parameter-server
    job's end), each ticked in turn after the pure ones; the first fault one names ends it."""
    while not wait(0):
        snap = control.snapshot()
        if on_tick is not None:
            on_tick(snap)
        fault = check(snap, alloc, policy, started, elastic)
        for watcher in watchers:
            if fault is not None:
                break
            fault = watcher.tick(snap, note)
        if fault is not None:
            log.warning("fault detected: %s", fault.message)
            return fault
        if wait(policy.poll_s):
            break
    return None
