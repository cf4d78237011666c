"""The outcome of a job: JobResult (one per attempt) and RunResult (all attempts). Pure values."""

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


@dataclass(frozen=True, slots=True)
class JobResult:
    state: JobState
    exit_code: int
    run_dir: Path
    duration_s: float
    failed_rank: int | None = None
    failed_host: str | None = None
    signal_name: str | None = None
    log_tail: tuple[str, ...] = ()
    fault: str | None = None
    fault_kind: str | None = None
    fault_hosts: tuple[str, ...] = ()
    detected_at: float | None = None  # wall clock (time.time()): fault seen, or the job's end
    torn_down_at: float | None = None  # wall clock when every host was verified clean
    teardown: tuple[HostTeardown, ...] = ()
    teardown_s: float | None = None
    attempt: int = 1

    @property
    def clean_teardown(self) -> bool:
        return all(t.clean for t in self.teardown)

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "run_dir": str(self.run_dir),
            "duration_s": round(self.duration_s, 3),
            "failed_rank": self.failed_rank,
            "failed_host": self.failed_host,
            "signal": self.signal_name,
            "fault": self.fault,
            "fault_kind": self.fault_kind,
            "fault_hosts": list(self.fault_hosts),
            "detected_at": _round(self.detected_at),
            "torn_down_at": _round(self.torn_down_at),
            "teardown_s": _round(self.teardown_s),
            "teardown": [t.to_json() for t in self.teardown],
            "log_tail": list(self.log_tail),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
