"""The outcome of a job: JobResult (one per attempt) and its Failure. Pure values."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


class FailureKind(enum.Enum):
    """Why an attempt failed. The first three come from the job itself; the rest are faults
    ringtrain detected (and then tore the job down)."""

    RANK_EXIT = "rank-exit"  # a rank exited non-zero
    RANK_SIGNAL = "rank-signal"  # a rank was killed by a signal that was not ringtrain's
    LAUNCHER = "launcher"  # mpirun/horovodrun/srun failed and named no rank
    DAEMON_LOST = "daemon-lost"  # mpirun lost its daemon (orted) on a host
    START_TIMEOUT = "start-timeout"
    HOST_LOST = "host-lost"
    RANK_SILENT = "rank-silent"  # one rank stopped answering while its host is fine
    STALL = "stall"
    EXIT_HANG = "exit-hang"  # every script returned, the job did not exit: ended, a success
    STRAGGLER = "straggler"  # --on-straggler restart-without: a rank stayed far behind

    @property
    def exit_code(self) -> int | None:
        """The documented exit status of ``ringtrain launch`` for this kind; None: the job's
        own status (a rank's exit code, or 128+N for signal N)."""
        return FAULT_EXIT_CODES.get(self)

    @property
    def detected(self) -> bool:
        """A fault ringtrain saw and acted on (its own teardown's signals follow)."""
        return self in (
            FailureKind.START_TIMEOUT,
            FailureKind.HOST_LOST,
            FailureKind.RANK_SILENT,
            FailureKind.STALL,
            FailureKind.EXIT_HANG,
            FailureKind.STRAGGLER,
        )


# One exit status per fault ringtrain detects or reads from mpirun (README: "Exit status"),
# outside ringtrain's own errors (2-8) and the signals' 128+N.
FAULT_EXIT_CODES = {
    FailureKind.START_TIMEOUT: 20,
    FailureKind.HOST_LOST: 21,
    FailureKind.RANK_SILENT: 22,
    FailureKind.STALL: 23,
    FailureKind.DAEMON_LOST: 24,
    FailureKind.STRAGGLER: 25,
}


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


@dataclass(frozen=True, slots=True)
class RankFailure:
    """One failed rank: where it ran, how it ended (when known) and its last log lines."""

    rank: int
    host: str | None = None
    exit_code: int | None = None
    signal_name: str | None = None
    log_tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
            "log_tail": list(self.log_tail),
        }


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an attempt failed, built once (``run`` for the job's own failures, ``Session`` for
    faults it detected): the kind, the hosts involved, every failed rank with the root cause
    (the first observed) first."""

    kind: FailureKind
    message: str  # one line, phrased for the user
    hosts: tuple[str, ...] = ()
    ranks: tuple[RankFailure, ...] = ()
    launcher_tail: tuple[str, ...] = ()  # mpirun's own last lines, when no rank says more

    @property
    def root(self) -> RankFailure | None:
        return self.ranks[0] if self.ranks else None

    def describe(self, attempt: int) -> str:
        """The root-cause report: what failed, then the root rank's last log lines."""
        lines = [f"{self.message} (attempt {attempt})"]
        others = [r.rank for r in self.ranks[1:]]
        if others:
            lines.append(f"also failed: ranks {', '.join(map(str, others[:16]))}")
        root = self.root
        if root is not None and root.log_tail:
            lines.append(f"last lines of rank {root.rank}'s log:")
            lines += [f"    {t}" for t in root.log_tail[-10:]]
        elif self.launcher_tail:
            lines.append("last lines of the launcher's output:")
            lines += [f"    {t}" for t in self.launcher_tail[-10:]]
        return "\n".join(lines)

    def hint(self, attempt_dir: Path) -> str:
        if self.kind is FailureKind.HOST_LOST:
            return f"check {', '.join(self.hosts)} (ringtrain check), or pass --max-restarts"
        if self.root is not None:
            return f"see {attempt_dir}/rank.{self.root.rank}.log for the full log"
        return f"see the logs in {attempt_dir}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "hosts": list(self.hosts),
            "ranks": [r.to_json() for r in self.ranks],
            "launcher_tail": list(self.launcher_tail),
        }


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
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
