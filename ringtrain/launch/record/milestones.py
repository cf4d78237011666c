"""The recovery ledger: when each attempt reached its milestones, and each incident's time to
training again (TTTA). PURE.

``observe`` is fed every supervision tick's snapshot and keeps the first wall-clock time each
milestone was seen: every rank checked in, every rank through ``hvd.init()``, the first
progress report (training again). ``incidents`` reads a run's attempts: for each restart,
the fault, when it was detected and torn down, when the next attempt started and reached
each milestone, where it resumed from, and the TTTA (first progress again minus detection):
the headline figure of a restart, as in arXiv 2410.21680 and FlashRecovery.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringtrain.launch.record.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Milestones:
    """Wall-clock times (time.time()) one attempt first reached each milestone; None: not."""

    started: float | None = None
    arrived: float | None = None  # every rank checked in
    initialized: float | None = None  # every rank through hvd.init()
    training: float | None = None  # the first progress report

    def to_json(self) -> dict[str, Any]:
        return {k: None if v is None else round(v, 3) for k, v in (
            ("started", self.started), ("arrived", self.arrived),
            ("initialized", self.initialized), ("training", self.training))}

    @classmethod
    def from_json(cls, d: Any) -> Milestones | None:
        if not isinstance(d, dict):
            return None
        return cls(*(d.get(k) for k in ("started", "arrived", "initialized", "training")))


def observe(marks: Milestones, snap: Snapshot, np: int, now: float) -> Milestones:
    """``marks`` with whatever ``snap`` shows for the first time, stamped ``now``."""
    arrived = marks.arrived
    if arrived is None and len(snap.ranks) >= np:
        arrived = now
    initialized = marks.initialized
    if initialized is None and len(snap.ranks) >= np and all(r.initialized for r in snap.ranks):
        initialized = now
    training = marks.training
    if training is None and snap.progress is not None:
        training = now
    return replace(marks, arrived=arrived, initialized=initialized, training=training)


@dataclass(frozen=True, slots=True)
class Incident:
    """One restart: the fault that ended attempt ``attempt`` and how the next one came back."""

    attempt: int
    fault: str
    detected: float | None
    torn_down: float | None
    restarted: float | None
    arrived: float | None
    initialized: float | None
    training: float | None
    resumed_step: int | None
    rechecked: float | None = None  # the hosts' GPUs re-checked (launch/recover/recheck.py)
    recheck: str | None = None  # what the re-check found, when it waited or left a host out

    @property
    def ttta_s(self) -> float | None:
        """Time to training again: from detection to the first progress report."""
        if self.detected is None or self.training is None:
            return None
        return self.training - self.detected

    def stages(self) -> tuple[tuple[str, float | None], ...]:
        """Each milestone as seconds after detection."""
        def since(t: float | None) -> float | None:
            return None if t is None or self.detected is None else t - self.detected
        return (("torn down", since(self.torn_down)), ("re-checked", since(self.rechecked)),
                ("restarted", since(self.restarted)),
                ("ranks arrived", since(self.arrived)), ("hvd.init done", since(self.initialized)),
                ("training again", since(self.training)))

    def describe(self) -> str:
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in self.stages() if s is not None)
        where = (f"; resumed from step {self.resumed_step}" if self.resumed_step is not None
                 else "; resumed from the start")
        found = f"; re-check: {self.recheck}" if self.recheck else ""
        return (f"after attempt {self.attempt}: {self.fault}: {parts or 'no timings'}{where}"
                f"{found}")

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "fault": self.fault, "detected": self.detected,
                "ttta_s": None if self.ttta_s is None else round(self.ttta_s, 3),
                "stages_s": {k: None if v is None else round(v, 3) for k, v in self.stages()},
                "resumed_step": self.resumed_step, "recheck": self.recheck}
