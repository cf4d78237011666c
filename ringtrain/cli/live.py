"""Live view of a running job: arrivals while starting, epoch/step/loss/throughput while training.

On a terminal it is one status line kept at the bottom (rank output scrolls above it); otherwise
plain ``ringtrain:`` lines when something changes (progress at most every 10 s).
The status lines are chosen and logged to ``runs/<id>/events.log`` and ``events.jsonl`` below
both doors (launch/lifecycle.py's Recorder, which hands them to ``status``).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ringtrain.cli.ring_view import show_ring_check
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.hostfile import Allocation, Inventory
from ringtrain.launch.job.run import OutputLine
from ringtrain.launch.record.eventlog import is_warning
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.supervise.status import Status, describe_arrivals, describe_progress
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict
from ringtrain.ringcheck.runner import RingCheck

QUEUE_LINES = 10_000


class LiveView:
    def __init__(
        self,
        stream: TextIO = sys.stderr,
        console_ranks: frozenset[int] | None = None,
        quiet: bool = False,
        rank_stream: TextIO | None = None,
    ) -> None:
        """``quiet`` (-q): ringtrain's status lines go to events.log only; warnings and the
        ranks' output still reach the console. ``rank_stream``: where the ranks' stdout goes
        (default stdout; ``launch --json`` keeps stdout for the result)."""
        self.stream = stream
        self.quiet = quiet
        self.console_ranks = console_ranks  # None: every rank's lines reach the console
        self.tty = stream.isatty()
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.out = Console(file=rank_stream or sys.stdout, highlight=False, soft_wrap=True,
                           markup=False)
        self._live: Live | None = None
        # Console writes go through a queue to one writer thread: a console nobody reads (a
        # paused pager, a stalled CI log pipe) never blocks supervision, teardown or the
        # job's output pump. Lines that do not fit are dropped from the console (they are in
        # the logs) and counted.
        self._queue: queue.Queue[Callable[[], object]] = queue.Queue(maxsize=QUEUE_LINES)
        self.dropped = 0
        threading.Thread(target=self._write, name="ringtrain-console", daemon=True).start()

    def start(self) -> None:
        if self.tty and not self.quiet:
            self._live = Live(Text(""), console=self.console, transient=True, auto_refresh=False)
            self._emit(self._live.start)

    def stop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            self._emit(live.stop)
        self.flush()

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until what was queued reached the console."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.dropped:
            dropped, self.dropped = self.dropped, 0
            self._emit(lambda: self.console.print(
                f"ringtrain: {dropped} line(s) were not shown (the console was not reading); "
                "every line is in the run's logs", markup=False))

    def note(self, text: str) -> None:
        """A plain status line: shown (under -q only warnings); the Recorder logged it."""
        if self.quiet and not is_warning(text):
            return
        self._emit(lambda: self.console.print(f"ringtrain: {text}", markup=False))

    def line(self, line: OutputLine) -> None:
        chosen = self.console_ranks
        if chosen is not None and line.rank is not None and line.rank not in chosen:
            return  # still in that rank's log file
        text = line.text if line.rank is None else f"[{line.rank}] {line.text}"
        target = self.console if line.stream == "stderr" else self.out
        self._emit(lambda: target.print(text, markup=False))

    def _emit(self, write: Callable[[], object]) -> None:
        try:
            self._queue.put_nowait(write)
        except queue.Full:
            self.dropped += 1

    def _write(self) -> None:
        while True:
            write = self._queue.get()
            try:
                write()
            except Exception:  # noqa: S110 - the console is gone; the logs have everything
                pass
            finally:
                self._queue.task_done()

    def verdict(
        self,
        inventory: Inventory,
        report: ProbeReport,
        verdict: PreflightVerdict,
        policy: PreflightPolicy,
    ) -> None:
        """The pre-flight table, on stderr like every ringtrain line (launch and dry run);
        under -q only when a host has a problem or a warning."""
        quiet_ok = not (verdict.refused or verdict.warnings or verdict.excluded
                        or any(h.warnings for h in verdict.hosts))
        if self.quiet and quiet_ok:
            return
        self._emit(lambda: print_verdict(inventory, report, verdict, policy, stderr=True))

    def ring_check(self, check: RingCheck) -> None:
        """``launch --ring-check``'s table, before the job (the assembly's ring gate)."""
        self._emit(lambda: show_ring_check(check, stderr=True))

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        live = self._live
        if live is not None:
            text = describe_progress(snap) or describe_arrivals(snap, alloc)
            status = Text(f"ringtrain: {text}")
            self._emit(lambda: live.update(status, refresh=True))

    def status(self, line: Status) -> None:
        """A status line of its own (the Recorder logged it): on a terminal the bottom line
        shows it already, so only every rank arrived is printed; elsewhere every one."""
        if self.quiet or (self.tty and not (line.kind == "arrivals" and line.all_arrived)):
            return
        self._emit(lambda: self.console.print(f"ringtrain: {line.text}", markup=False))
