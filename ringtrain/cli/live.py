"""Live view of a running job: arrivals while starting, epoch/step/loss/throughput while training.

On a terminal it is one status line kept at the bottom (rank output scrolls above it); otherwise
plain ``ringtrain:`` lines when something changes (at most every ``plain_every_s`` for progress).
Every status line also goes to ``runs/<id>/events.log``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ringtrain.cli.check_cmd import print_verdict
from ringtrain.hostfile import Allocation, Inventory
from ringtrain.launch.control import Snapshot
from ringtrain.launch.preflight import PreflightPolicy, PreflightVerdict
from ringtrain.launch.probe_parse import ProbeReport
from ringtrain.launch.run import OutputLine
from ringtrain.launch.supervise import arrivals, rank_hosts


def describe_arrivals(snap: Snapshot, alloc: Allocation) -> str:
    arrived = arrivals(snap, alloc, rank_hosts(alloc))
    ready = sum(r.initialized for r in snap.ranks)
    per_host = " ".join(f"{h.name} {arrived[h.name]}/{h.slots}" for h in alloc.hosts[:8])
    more = f" (+{len(alloc.hosts) - 8} hosts)" if len(alloc.hosts) > 8 else ""
    text = f"ranks arrived {len(snap.ranks)}/{alloc.np} [{per_host}{more}]"
    return text + (f", hvd.init done {ready}/{alloc.np}" if ready else "")


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
    def __init__(self, stream: TextIO = sys.stderr, plain_every_s: float = 10.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.plain_every_s = plain_every_s
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.out = Console(file=sys.stdout, highlight=False, soft_wrap=True, markup=False)
        self.events: Path | None = None
        self._live: Live | None = None
        self._lock = threading.Lock()
        self._last_arrivals = ""
        self._last_progress_key: tuple[object, ...] = ()
        self._last_plain = 0.0

    def start(self) -> None:
        if self.tty:
            self._live = Live(Text(""), console=self.console, transient=True, auto_refresh=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def note(self, text: str) -> None:
        """A plain status line: shown and logged."""
        with self._lock:
            self.console.print(f"ringtrain: {text}", markup=False)
            self._log(text)

    def line(self, line: OutputLine) -> None:
        text = line.text if line.rank is None else f"[{line.rank}] {line.text}"
        with self._lock:
            (self.console if line.stream == "stderr" else self.out).print(text, markup=False)

    def verdict(
        self,
        inventory: Inventory,
        report: ProbeReport,
        verdict: PreflightVerdict,
        policy: PreflightPolicy,
    ) -> None:
        """The pre-flight table, on stderr like every ringtrain line (launch and dry run)."""
        with self._lock:
            print_verdict(inventory, report, verdict, policy, stderr=True)

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        arrivals = describe_arrivals(snap, alloc)
        progress = describe_progress(snap)
        if self._live is not None:
            with self._lock:
                self._live.update(Text(f"ringtrain: {progress or arrivals}"), refresh=True)
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
        with self._lock:
            if force:
                self.console.print(f"ringtrain: {text}", markup=False)
            self._log(text)

    def _log(self, text: str) -> None:
        if self.events is None:
            return
        try:
            with self.events.open("a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")
        except OSError as err:  # run dir deleted or disk full: the terminal still has it all
            self.console.print(f"ringtrain: warning: cannot write {self.events} ({err}); "
                               "events go to this terminal only", markup=False)
            self.events = None
