"""Why an attempt failed: the FailureKind (with its exit code), every failed rank, the root
cause first, with its report (``describe``) and hint. Pure values."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


# One exit status per fault ringtrain detects or reads from mpirun (docs/ELASTIC.md: "Exit status"),
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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RankFailure:
        return cls(d["rank"], d.get("host"), d.get("exit_code"), d.get("signal"),
                   tuple(d.get("log_tail") or ()))


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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Failure:
        return cls(FailureKind(d["kind"]), d["message"], tuple(d.get("hosts") or ()),
                   tuple(RankFailure.from_json(r) for r in d.get("ranks") or ()),
                   tuple(d.get("launcher_tail") or ()))
