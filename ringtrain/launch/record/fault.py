"""A fault supervision names: what kind, what it says, where, when. PURE."""

from __future__ import annotations

from dataclasses import dataclass

from ringtrain.launch.record.failure import FailureKind


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FailureKind  # one of the detected kinds
    message: str
    hosts: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    at: float = 0.0
