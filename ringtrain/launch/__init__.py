"""Launching and supervising a job: a wing of rooms, each standing on the ones below it.

    record     the run's record: pure values (result, failure, fault, the ledger, events)
    plan       what an attempt runs, decided before anything starts (pure)
    job        the run directory, the secrets' delivery, the launcher process
    control    the control channel's launcher end
    supervise  watching an attempt: faults, stragglers, the teardown
    elastic    --elastic: losses absorbed, the discovery list, spares
    recover    after an attempt: restart or not, the commit, the GPU re-check, rest
    (top)      the loop (session.py), the reporter, the lifecycle of a running launch

tests/unit/test_layering.py holds each room to the rooms below it. The face below names what
a caller needs; it loads on first use, so importing one room does not load the wing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringtrain.launch.plan.make import LaunchPlan
    from ringtrain.launch.record.result import JobResult, JobState
    from ringtrain.launch.reporter import Reporter
    from ringtrain.launch.session import Session

__all__ = ["JobResult", "JobState", "LaunchPlan", "Reporter", "Session"]

_FACE = {
    "JobResult": "ringtrain.launch.record.result",
    "JobState": "ringtrain.launch.record.result",
    "LaunchPlan": "ringtrain.launch.plan.make",
    "Reporter": "ringtrain.launch.reporter",
    "Session": "ringtrain.launch.session",
}


def __getattr__(name: str) -> Any:
    if name not in _FACE:
        raise AttributeError(f"module 'ringtrain.launch' has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
