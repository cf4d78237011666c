"""The outcome of a job: JobResult (one per attempt) and its Failure. Pure values.

The last attempt's JobResult also carries the run: the earlier attempts, what ringtrain
decided after each (a restart, the hosts it left out), the newest committed checkpoint as a
``ResumePoint`` and why the run stopped. ``run_json()`` is result.json;
``JobResult.from_json`` reads it back (times rounded to the millisecond), so
``ringtrain runs show`` renders the very value the launch printed (``what_ringtrain_did``,
``Failure.describe``).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringtrain.launch.record.absorbed import Absorbed
from ringtrain.launch.record.failure import FAULT_EXIT_CODES, Failure, FailureKind, RankFailure
from ringtrain.launch.record.gpurecheck import Recheck
from ringtrain.launch.record.milestones import Incident, Milestones

__all__ = [
    "FAULT_EXIT_CODES", "Failure", "FailureKind", "HostTeardown", "JobResult", "JobState",
    "RankFailure", "ResumePoint", "Straggler",
]

OTHER_MODEL = "belongs to another model"  # ringtrain.keras.resume's words for a mismatch
_DOCTOR_KEYS = ("host", "code", "gpu", "measured", "action")
RESULT_SCHEMA = 2  # result.json: 2 adds schema, decision/excluded per attempt, total_s


class JobState(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class HostTeardown:
    """What the reaper found and ended on one host after the job; ``left`` must be empty."""

    host: str
    killed: int
    left: tuple[str, ...] = ()
    error: str | None = None

    @property
    def clean(self) -> bool:
        return self.error is None and not self.left

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "killed": self.killed,
            "left": list(self.left),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HostTeardown:
        return cls(d["host"], int(d["killed"]), tuple(d.get("left") or ()), d.get("error"))


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank named a straggler during training: its own step time (before the all-reduce)
    against the median of the other ranks' and against its own best, sustained for
    ``seconds``; ``peak``: the highest ratio seen while named; ``cleared``: it caught up."""

    rank: int
    host: str
    vs_median: float
    vs_best: float | None
    compute_s: float
    median_s: float
    seconds: float
    peak: float
    cleared: bool = False

    def describe(self) -> str:
        best = f", {self.vs_best:.1f}x its own best" if self.vs_best is not None else ""
        return (
            f"{self.host}: rank {self.rank} step {self.vs_median:.1f}x the median for "
            f"{self.seconds:.0f} s (its own part {self.compute_s * 1e3:.1f} ms, the others' "
            f"median {self.median_s * 1e3:.1f} ms{best})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "vs_median": round(self.vs_median, 3),
            "vs_best": None if self.vs_best is None else round(self.vs_best, 3),
            "compute_s": round(self.compute_s, 6),
            "median_s": round(self.median_s, 6),
            "seconds": round(self.seconds, 1),
            "peak": round(self.peak, 3),
            "cleared": self.cleared,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Straggler:
        return cls(d["rank"], d["host"], d["vs_median"], d.get("vs_best"), d["compute_s"],
                   d["median_s"], d["seconds"], d["peak"], bool(d.get("cleared")))


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """The newest committed checkpoint a run's storage held when an attempt ended (where a
    restart, or a relaunch with the same --checkpoint, resumes), or why it could not be
    listed (``error``: the storage was down; never a false "none")."""

    url: str
    step: int | None = None
    epoch: int | None = None
    name: str | None = None
    error: str | None = None

    def describe(self) -> str:
        if self.error is not None:
            return f"could not list {self.url} ({self.error})"
        return f"step {self.step} (epoch {self.epoch}) at {self.url}"

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"url": self.url, "error": self.error}
        return {"url": self.url, "step": self.step, "epoch": self.epoch, "name": self.name}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> ResumePoint | None:
        if not isinstance(d, dict) or ("step" not in d and "error" not in d):
            return None
        return cls(str(d.get("url", "?")), d.get("step"), d.get("epoch"), d.get("name"),
                   d.get("error"))


@dataclass(frozen=True, slots=True)
class JobResult:
    state: JobState
    exit_code: int
    run_dir: Path
    duration_s: float
    failure: Failure | None = None
    signal_name: str | None = None  # the launcher's own end by signal (an interrupt's)
    detected_at: float | None = None  # wall clock (time.time()): fault seen, or the job's end
    torn_down_at: float | None = None  # wall clock when every host was verified clean
    teardown: tuple[HostTeardown, ...] = ()
    teardown_s: float | None = None
    attempt: int = 1
    warnings: tuple[str, ...] = ()  # what could not take effect, what ringtrain overrode
    stragglers: tuple[Straggler, ...] = ()  # ranks named stragglers during this attempt
    failed_task: str | None = None  # TF strategies: the failed rank's task ("ps:1")
    # what ringtrain decided after this attempt: "restarting: attempt 2 of 3, without gpu03
    # for a cooldown", "restart budget spent (1 of 1)", ...; and the hosts it left out
    decision: str | None = None
    excluded: tuple[str, ...] = ()
    resume_point: ResumePoint | None = None  # the newest commit when this attempt ended
    milestones: Milestones | None = None  # when it started, arrived, initialised, trained
    recheck: Recheck | None = None  # before the restart that followed: GPUs freed, left out
    absorbed: tuple[Absorbed, ...] = ()  # --elastic: ranks lost while the others went on
    # the pre-flight doctor's findings before this attempt: (host, code, GPU, measured, action)
    doctor: tuple[tuple[str, str, int | None, str, str], ...] = ()
    # the run, on its last attempt's result: the attempts before it, the restarts asked, the
    # ranks asked (-np), why no restart followed
    earlier: tuple[JobResult, ...] = ()
    max_restarts: int = 0
    np_asked: int | None = None
    stop_reason: str | None = None
    wall_s: float | None = None  # from the launch's start to now: pre-flight, restarts and all

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def attempts(self) -> tuple[JobResult, ...]:
        """Every attempt of the run, this one last."""
        return (*self.earlier, self)

    @property
    def total_s(self) -> float:
        """The whole run's time: from the launch's start (pre-flight, restarts and all), or,
        where that was not recorded, every attempt's."""
        return self.wall_s if self.wall_s is not None else sum(a.duration_s
                                                                for a in self.attempts)

    @property
    def clean_teardown(self) -> bool:
        return all(t.clean for t in self.teardown)

    @property
    def attempt_dir(self) -> Path:
        return self.run_dir / f"attempt-{self.attempt}"

    def to_json(self) -> dict[str, Any]:
        f, root = self.failure, self.failure.root if self.failure else None
        return {
            "attempt": self.attempt,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "run_dir": str(self.run_dir),
            "duration_s": round(self.duration_s, 3),
            "failure": f.to_json() if f else None,
            # flat views of the failure, kept for scripts that read result.json
            "failed_rank": root.rank if root else None,
            "failed_host": (root.host if root else None) or (f.hosts[0] if f and f.hosts else None),
            "signal": (root.signal_name if root else None) or self.signal_name,
            "fault": f.message if f and f.kind.detected else None,
            "fault_kind": f.kind.value if f else None,
            "fault_hosts": list(f.hosts) if f else [],
            "log_tail": list(root.log_tail) if root else [],
            "detected_at": _round(self.detected_at),
            "torn_down_at": _round(self.torn_down_at),
            "teardown_s": _round(self.teardown_s),
            "teardown": [t.to_json() for t in self.teardown],
            "warnings": list(self.warnings),
            "stragglers": [s.to_json() for s in self.stragglers],
            "failed_task": self.failed_task,
            "decision": self.decision,
            "excluded": list(self.excluded),
            "checkpoint": self.resume_point.to_json() if self.resume_point else None,
            "milestones": self.milestones.to_json() if self.milestones else None,
            "recheck": self.recheck.to_json() if self.recheck else None,
            "absorbed": [a.to_json() for a in self.absorbed],
            "doctor": [dict(zip(_DOCTOR_KEYS, d, strict=True)) for d in self.doctor],
        }

    def run_json(self) -> dict[str, Any]:
        """result.json: this (last) attempt's fields at the top, for scripts that read them,
        then the run: every attempt, the checkpoint, why it stopped."""
        return {
            "schema": RESULT_SCHEMA,
            **self.to_json(),
            "run_id": self.run_id,
            "attempts": [a.to_json() for a in self.attempts],
            "total_s": round(self.total_s, 3),
            "np": self.np_asked,
            "max_restarts": self.max_restarts,
            "last_checkpoint": self.resume_point.to_json() if self.resume_point else None,
            "stop_reason": self.stop_reason,
            "incidents": [i.to_json() for i in incidents(self.attempts)],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobResult:
        """A result.json (the run, on its last attempt) or one attempt's entry of it."""
        one = cls._attempt_from_json(d)
        attempts = [cls._attempt_from_json(a) for a in d.get("attempts") or ()]
        return replace(
            one,
            earlier=tuple(attempts[:-1]),
            # result.json before schema 2 did not record it: at least the restarts it made
            max_restarts=int(d.get("max_restarts") or max(0, len(attempts) - 1)),
            np_asked=d.get("np"),
            resume_point=ResumePoint.from_json(d.get("last_checkpoint")),
            stop_reason=d.get("stop_reason"),
            wall_s=d.get("total_s"),
        )

    @classmethod
    def _attempt_from_json(cls, d: dict[str, Any]) -> JobResult:
        failure = d.get("failure")
        return cls(
            state=JobState(d["state"]),
            exit_code=int(d["exit_code"]),
            run_dir=Path(d["run_dir"]),
            duration_s=float(d.get("duration_s") or 0.0),
            failure=Failure.from_json(failure) if failure else None,
            signal_name=None if failure else d.get("signal"),
            detected_at=d.get("detected_at"),
            torn_down_at=d.get("torn_down_at"),
            teardown=tuple(HostTeardown.from_json(t) for t in d.get("teardown") or ()),
            teardown_s=d.get("teardown_s"),
            attempt=int(d.get("attempt") or 1),
            warnings=tuple(d.get("warnings") or ()),
            stragglers=tuple(Straggler.from_json(x) for x in d.get("stragglers") or ()),
            failed_task=d.get("failed_task"),
            decision=d.get("decision"),
            excluded=tuple(d.get("excluded") or ()),
            resume_point=ResumePoint.from_json(d.get("checkpoint")),
            milestones=Milestones.from_json(d.get("milestones")),
            recheck=Recheck.from_json(d.get("recheck")),
            absorbed=tuple(Absorbed.from_json(a) for a in d.get("absorbed") or ()),
            doctor=tuple((str(x["host"]), str(x["code"]), x.get("gpu"), str(x["measured"]),
                          str(x["action"])) for x in d.get("doctor") or ()),
        )

    def what_ringtrain_did(self) -> str:
        """The second half of the root-cause report: teardown, attempts, the resume point."""
        clean = [t.host for t in self.teardown if t.clean]
        unverified = [t.host for t in self.teardown if not t.clean]
        did = f"ringtrain: tore the job down; {len(clean)} host(s) verified clean"
        if unverified:
            did += f", not verified: {', '.join(unverified)}"
        did += f". Attempt {self.attempt} of {self.max_restarts + 1}"
        if self.state is JobState.INTERRUPTED:
            did += " (stopped by the user: no restart)"
        elif self.decision and self.decision.startswith("crash loop"):
            did += f" ({self.decision})"
        else:
            did += " (restarts used up)" if self.max_restarts else " (no restart asked)"
        for a in self.earlier:
            if a.decision:
                did += f"; after attempt {a.attempt}: {a.decision}"
        ckpt = self.resume_point
        root = self.failure.root if self.failure is not None else None
        if root is not None and any(OTHER_MODEL in line for line in root.log_tail):
            where = ckpt.url if ckpt is not None else "its --checkpoint"
            did += (f". The checkpoint at {where} belongs to another model: relaunch with a "
                    "new --checkpoint URL for this one (a relaunch with the same one fails "
                    "the same way).")
        elif ckpt is not None and ckpt.error is not None:
            did += (f". Could not list the checkpoints at {ckpt.url} ({ckpt.error}); a "
                    f"relaunch with --checkpoint {ckpt.url} resumes from the newest one that "
                    "verifies.")
        elif ckpt is not None:
            did += (f". Last committed checkpoint: {ckpt.describe()}; a relaunch with "
                    f"--checkpoint {ckpt.url} resumes there.")
        else:
            did += ". No committed checkpoint."
        return did


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def incidents(attempts: Sequence[JobResult]) -> tuple[Incident, ...]:
    """Every restart of a run, in order."""
    out = []
    for before, after in itertools.pairwise(attempts):
        marks = after.milestones or Milestones()
        fault = before.failure.message if before.failure is not None else before.state.value
        resumed = before.resume_point.step if before.resume_point is not None else None
        check = before.recheck
        found = check.describe() if check and (check.waited or check.left_out) else None
        out.append(Incident(before.attempt, fault, before.detected_at, before.torn_down_at,
                            marks.started, marks.arrived, marks.initialized, marks.training,
                            resumed, check.finished if check else None, found))
    return tuple(out)
