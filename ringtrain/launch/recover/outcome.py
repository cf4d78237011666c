"""How an attempt ended and what follows. Pure.

``merge``: the attempt's result from the job's own, the fault ringtrain detected and the
teardown; ``decide``: restart or not, and without which hosts. The Session (session.py)
sequences them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.result import (
    Failure,
    FailureKind,
    HostTeardown,
    JobResult,
    JobState,
    RankFailure,
)
from ringtrain.spec import RestartPolicy


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to restart; hosts to leave out (``exclude``: lost or never started) and hosts
    to avoid when the others suffice (``suspect``: a rank there was killed by a signal that
    was not ringtrain's, e.g. the OOM killer)."""

    restart: bool
    reason: str
    exclude: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()


def decide(result: JobResult, attempt: int, policy: RestartPolicy,
           history: Sequence[JobResult] = ()) -> Decision:
    """Whether to restart after ``result``, and which hosts to leave out. Pure.

    ``history``: every attempt so far, this one last, each with the newest commit at its end.
    When the last ``policy.stall_restarts`` restarts each crashed (the script itself failed:
    no host lost, no hang) and committed nothing new, another restart would only crash
    again: the job stops and says so."""
    if result.state is JobState.SUCCEEDED:
        return Decision(False, "succeeded")
    if result.state is JobState.INTERRUPTED:
        return Decision(False, "stopped by the user")
    exclude: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()
    failure = result.failure
    if failure is not None and failure.kind in (
        FailureKind.HOST_LOST, FailureKind.START_TIMEOUT, FailureKind.STRAGGLER
    ):
        exclude = failure.hosts
    elif (
        failure is not None
        and failure.kind is FailureKind.RANK_SIGNAL
        and failure.root is not None
        and failure.root.host is not None
    ):
        # killed by something other than ringtrain (OOM killer, hardware): suspect the host;
        # after a fault ringtrain detected, the signals are its own teardown's
        suspect = (failure.root.host,)
    # processes that outlived the teardown would share the host with the next attempt's
    # ranks: left out too; a host the reaper could not ask (an ssh hiccup, say) is only
    # avoided when the others suffice ("(launcher)" is this machine)
    hosts = [t for t in result.teardown if not t.host.startswith("(") and t.host not in exclude]
    unclean = tuple(t.host for t in hosts if t.left)
    suspect += tuple(t.host for t in hosts
                     if t.error and not t.left and t.host not in (*unclean, *suspect))
    if attempt > policy.max_restarts:
        spent = f"restart budget spent ({policy.max_restarts} of {policy.max_restarts})"
        return Decision(
            False, spent if policy.max_restarts else "no restarts asked (--max-restarts)"
        )
    stalled = no_progress(history, policy.stall_restarts)
    if stalled is not None:
        return Decision(False, stalled)
    why = f"restarting: attempt {attempt + 1} of {policy.max_restarts + 1}"
    if exclude:
        why += f", without {', '.join(exclude)} for a cooldown"
    if unclean:
        why += (f", without {', '.join(unclean)} (processes outlived the teardown) "
                "for a cooldown")
    if suspect:
        why += f", avoiding {', '.join(suspect)} if the other hosts suffice"
    return Decision(True, why, (*exclude, *unclean), suspect)


def no_progress(history: Sequence[JobResult], restarts: int) -> str | None:
    """Why the job is in a crash loop (``restarts`` restarts in a row, each a crash of the
    script, and not one new commit), or None. A storage that could not be listed says
    nothing either way; a lost host, a hang or a straggler is not the script's crash."""
    if restarts < 1 or len(history) <= restarts:
        return None
    window = history[-(restarts + 1):]
    if not all(a.failure is not None and a.failure.kind in _CRASHES for a in window):
        return None
    commits = [a.resume_point for a in window]
    if any(c is not None and c.error is not None for c in commits):
        return None
    steps = {None if c is None else c.step for c in commits}
    if len(steps) != 1:
        return None
    (step,) = steps
    where = f"still at step {step}" if step is not None else "none yet"
    return (f"crash loop: {restarts} restarts in a row and no new checkpoint committed "
            f"({where}); not restarting again: fix the cause (see the first failing rank's "
            "log), then relaunch (--stall-restarts 0 restarts regardless)")


_CRASHES = (FailureKind.RANK_EXIT, FailureKind.RANK_SIGNAL, FailureKind.LAUNCHER)


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt ended, beyond the job's own result: when ringtrain saw it end (or the
    fault), when every host was clean, the ranks' last lines and hosts, and whether every
    rank said its script returned."""

    detected_at: float
    torn_down_at: float
    tails: Mapping[int, tuple[str, ...]]
    where: Mapping[int, str]
    finished: bool = False
    never_started: tuple[int, ...] = ()  # ranks with no check-in and no output (supervise)


def merge(
    result: JobResult,
    fault: Fault | None,
    teardown: tuple[HostTeardown, ...],
    attempt: int,
    ending: Ending,
) -> JobResult:
    """The attempt's result: the job's own, with teardown and timing; a fault ringtrain
    detected takes the place of whatever the teardown's signals made of the job; and a job
    whose every rank returned from its script succeeded, however its processes exited. Pure."""
    merged = replace(
        result,
        detected_at=ending.detected_at,  # when ringtrain saw the fault, or the job's end
        teardown=teardown,
        attempt=attempt,
        torn_down_at=ending.torn_down_at,
        teardown_s=ending.torn_down_at - ending.detected_at,
    )
    if ending.finished and result.state is not JobState.INTERRUPTED:
        if fault is not None:
            note = fault.message
        elif result.state is JobState.FAILED:
            note = (
                f"every rank finished its script, then the job exited with code "
                f"{result.exit_code} while shutting down; counted as a success"
            )
        else:
            return merged
        return replace(merged, state=JobState.SUCCEEDED, exit_code=0, failure=None,
                       signal_name=None, warnings=(*merged.warnings, note))
    if fault is None and result.state is JobState.SUCCEEDED and ending.never_started:
        return _never_started(merged, ending)
    if fault is None:
        kind = merged.failure.kind if merged.failure else None
        if kind is not None and kind.exit_code is not None:  # a lost daemon: 24, not 205
            return replace(merged, exit_code=kind.exit_code)
        return merged
    tails, where = ending.tails, ending.where
    ranks = tuple(RankFailure(r, where.get(r), log_tail=tails.get(r, ())) for r in fault.ranks)
    return replace(
        merged,
        state=JobState.FAILED,
        exit_code=fault.kind.exit_code or result.exit_code or 1,
        failure=Failure(fault.kind, fault.message, fault.hosts, ranks),
        signal_name=None,  # the signals were ringtrain's own teardown
    )


def _never_started(merged: JobResult, ending: Ending) -> JobResult:
    """The launcher exited 0 but some ranks never ran: a failure, never a success."""
    ranks = ending.never_started
    listed = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    message = (f"the launcher exited 0, but rank{'s' if len(ranks) > 1 else ''} {listed} "
               "never started (no check-in, no output): see the launcher's own lines")
    hosts = tuple(sorted({ending.where[r] for r in ranks if r in ending.where}))
    return replace(merged, state=JobState.FAILED, exit_code=1, failure=Failure(
        FailureKind.LAUNCHER, message, hosts, tuple(RankFailure(r, ending.where.get(r))
                                                     for r in ranks)))
