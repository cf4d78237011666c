"""Live view of a running job: arrivals while starting, epoch/step/loss/throughput while training.

On a terminal it is one status line kept at the bottom (rank output scrolls above it); otherwise
plain ``ringtrain:`` lines when something changes (at most every ``plain_every_s`` for progress).
Every status line also goes to ``runs/<id>/events.log`` and, as JSON, ``runs/<id>/events.jsonl``
(one ``Event`` written both ways: launch/record/eventlog.py).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ringtrain.cli.ring_view import show_ring_check
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.hostfile import Allocation, Inventory
from ringtrain.launch.job.run import OutputLine
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.record.eventlog import Event, is_warning
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.supervise.detect import arrivals, rank_hosts
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict
from ringtrain.ringcheck.runner import RingCheck

if TYPE_CHECKING:
    from ringtrain.launch.session import Session

QUEUE_LINES = 10_000


class EventFiles:
    """A run's events.log and events.jsonl: each status line becomes one ``Event``, appended to
    both through the open run directory (created 0600, through no link). ``attempt`` says
    which attempt a line belongs to."""

    def __init__(self, files: RunDir, run_id: str,
                 attempt: Callable[[], int | None] = lambda: None) -> None:
        self.files, self.run_id, self.attempt = files, run_id, attempt

    @property
    def run_dir(self) -> Path:
        return self.files.path

    @classmethod
    def of(cls, session: Session) -> EventFiles:
        """The session's files; a line belongs to the attempt being placed or run (between a
        failed attempt and its restart, to the restart). After ``run()`` the caller sets
        ``attempt`` to the last one."""
        return cls(session.open_run_dir(), session.env.run_id, lambda: len(session.results) + 1)

    def write(self, text: str) -> None:
        event = Event(time.time(), text, self.run_id, self.attempt())
        self.files.append("events.log", event.log_line())
        self.files.append("events.jsonl", event.json_line())


def describe_arrivals(snap: Snapshot, alloc: Allocation) -> str:
    if len(snap.ranks) > alloc.np:  # --elastic: ranks joined (a spare, a host back)
        running: dict[str, int] = {}
        for r in snap.ranks:
            if r.connected:
                running[r.host] = running.get(r.host, 0) + 1
        ready = sum(r.initialized for r in snap.ranks if r.connected)
        return (f"ranks running {sum(running.values())} (placed with {alloc.np}) ["
                + " ".join(f"{h} {n}" for h, n in sorted(running.items())) + "]"
                + (f", hvd.init done {ready}" if ready else ""))
    arrived = arrivals(snap, alloc, rank_hosts(alloc))
    ready = sum(r.initialized for r in snap.ranks)
    per_host = " ".join(f"{h.name} {arrived[h.name]}/{h.slots}" for h in alloc.hosts[:8])
    more = f" (+{len(alloc.hosts) - 8} hosts)" if len(alloc.hosts) > 8 else ""
    text = f"ranks arrived {len(snap.ranks)}/{alloc.np} [{per_host}{more}]"
    forming = sum(r.forming_since is not None for r in snap.ranks)
    return text + (f", hvd.init done {ready}/{alloc.np}" if ready else "") + (
        f", forming the TensorFlow cluster {forming}/{alloc.np}" if forming else "")


def describe_progress(snap: Snapshot) -> str | None:
    p = snap.progress
    if p is None:
        return None
    parts = []
    if p.epoch is not None:
        parts.append(f"epoch {p.epoch}" + (f"/{p.epochs}" if p.epochs else ""))
    if p.step is not None:
        parts.append(f"step {p.step}" + (f"/{p.steps}" if p.steps else ""))
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.samples_per_s is not None:
        parts.append(f"{p.samples_per_s:,.0f} samples/s")
    return "training: " + ", ".join(parts) if parts else None


class LiveView:
    def __init__(
        self,
        stream: TextIO = sys.stderr,
        plain_every_s: float = 10.0,
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
        self.plain_every_s = plain_every_s
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.out = Console(file=rank_stream or sys.stdout, highlight=False, soft_wrap=True,
                           markup=False)
        self.events: EventFiles | None = None
        self._live: Live | None = None
        self._lock = threading.Lock()  # events.log and events.jsonl appends
        self._last_arrivals = ""
        self._last_progress_key: tuple[object, ...] = ()
        self._last_plain = 0.0
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
        """A plain status line: shown (under -q only warnings) and logged."""
        self._log(text)
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
        arrivals = describe_arrivals(snap, alloc)
        progress = describe_progress(snap)
        live = self._live
        if live is not None:
            status = Text(f"ringtrain: {progress or arrivals}")
            self._emit(lambda: live.update(status, refresh=True))
        if arrivals != self._last_arrivals:
            self._last_arrivals = arrivals
            self._status(arrivals, force=len(snap.ranks) == alloc.np or not self.tty)
        p = snap.progress
        if progress and p is not None:
            key = (p.epoch,)
            now = time.monotonic()
            if key != self._last_progress_key or now - self._last_plain > self.plain_every_s:
                self._last_progress_key, self._last_plain = key, now
                self._status(progress, force=not self.tty)

    def _status(self, text: str, force: bool) -> None:
        if force and not self.quiet:
            self._emit(lambda: self.console.print(f"ringtrain: {text}", markup=False))
        self._log(text)

    def _log(self, text: str) -> None:
        events = self.events
        if events is None:
            return
        try:
            with self._lock:
                events.write(text)
        except OSError as err:  # run dir deleted or disk full: the terminal still has it all
            warning = (f"ringtrain: warning: cannot write the events of {events.run_dir} "
                       f"({err}); events go to this terminal only")
            self._emit(lambda: self.console.print(warning, markup=False))
            self.events = None
