"""The Reporter seam: how a Session tells the outside what happens. The CLI draws it (LiveView);
the Python API and tests use ``NullReporter`` or their own. A Session never prints."""

from __future__ import annotations

from typing import Protocol

from ringtrain.hostfile import Allocation, Inventory
from ringtrain.launch.job.run import OutputLine
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict


class Reporter(Protocol):
    def note(self, text: str) -> None:
        """One line for the user ("attempt 2: ...", "restarting ...", warnings)."""

    def line(self, line: OutputLine) -> None:
        """One line of job output, with its rank (None: the launcher's own)."""

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        """Every supervision poll: arrivals, hvd.init, progress."""

    def verdict(
        self,
        inventory: Inventory,
        report: ProbeReport,
        verdict: PreflightVerdict,
        policy: PreflightPolicy,
    ) -> None:
        """The pre-flight table of one attempt, before it is applied."""


class NullReporter:
    """Reports nothing; keeps the notes (``notes``) for whoever wants them afterwards."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def line(self, line: OutputLine) -> None:
        pass

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        pass

    def verdict(
        self,
        inventory: Inventory,
        report: ProbeReport,
        verdict: PreflightVerdict,
        policy: PreflightPolicy,
    ) -> None:
        pass
