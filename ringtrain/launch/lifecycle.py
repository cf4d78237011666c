"""The life of a running launch, the same through both doors (``ringtrain launch`` and
``ringtrain.run()``): what the CLI once did alone.

* ``Recorder``: the reporter both doors hand the Session. Every status line (the notes and the
  supervision's status lines, launch/supervise/status.py) is also appended to the run's
  ``events.log`` and ``events.jsonl`` (one ``Event`` written both ways, launch/record/eventlog.py)
  once the run directory is open, then passed on to the door's own reporter (the CLI's live
  view, a caller's reporter, or NullReporter).
* ``answering``: while the job runs, SIGINT, SIGTERM and SIGHUP stop it on every host
  (result.json written, the teardown verified, no restart); SIGUSR1 (``sbatch
  --signal=B:USR1@<lead>``) is a preemption notice: rank 0 commits a checkpoint at its next
  batch end, then the job ends. Python lets only the main thread set handlers, so a launch run
  from another thread leaves the signals to its program.
* ``run``: the run directory, the events, the signals, the Session, then the teardown's and the
  recovery ledger's lines.
* ``failed``: the one error a failed, interrupted or preempted job raises: the root cause (the
  first rank failure by time, launch/record/failure.py), what ringtrain did, and the fix.

A handler runs on the main thread between two bytecodes, possibly while that thread holds the
view's or the control server's lock: taking them there would deadlock, so each handler starts a
thread and returns.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Protocol, runtime_checkable

from ringtrain.errors import JobFailed
from ringtrain.hostfile import Allocation, Inventory
from ringtrain.launch.job.run import OutputLine
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.record.eventlog import Event
from ringtrain.launch.record.result import JobResult, JobState, incidents
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.reporter import Reporter
from ringtrain.launch.session import Session
from ringtrain.launch.supervise.status import Status, StatusLines
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@runtime_checkable
class StatusDrawer(Protocol):
    """A reporter that also shows the status lines the Recorder logs (the CLI's view)."""

    def status(self, line: Status) -> None: ...


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


class Recorder:
    """The Session's reporter through either door: logs each status line to the events files
    (``events``, set once the run directory is open), then hands it to ``inner``."""

    def __init__(self, inner: Reporter) -> None:
        self.inner = inner
        self.events: EventFiles | None = None
        self._lines = StatusLines()
        self._lock = threading.Lock()  # events.log and events.jsonl appends

    def note(self, text: str) -> None:
        self._log(text)
        self.inner.note(text)

    def line(self, line: OutputLine) -> None:
        self.inner.line(line)

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        for status in self._lines.feed(snap, alloc, time.monotonic()):
            self._log(status.text)
            if isinstance(self.inner, StatusDrawer):
                self.inner.status(status)
        self.inner.tick(snap, alloc)

    def verdict(self, inventory: Inventory, report: ProbeReport, verdict: PreflightVerdict,
                policy: PreflightPolicy) -> None:
        self.inner.verdict(inventory, report, verdict, policy)

    def ring_check(self, check: object) -> None:
        """``launch --ring-check``'s table, for a door that draws it."""
        draw = getattr(self.inner, "ring_check", None)
        if callable(draw):
            draw(check)

    def _log(self, text: str) -> None:
        events = self.events
        if events is None:
            return
        try:
            with self._lock:
                events.write(text)
        except OSError as err:  # run dir deleted or disk full: the door's reporter has it all
            self.events = None
            self.inner.note(f"warning: cannot write the events of {events.run_dir} ({err}); "
                            "events go to this terminal only")


@contextmanager
def answering(session: Session, note: Callable[[str], None]) -> Iterator[None]:
    """Within: the stop signals stop the job; SIGUSR1 commits, then stops it. Off the main
    thread (where Python refuses handlers) nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int) -> None:
        try:
            note(f"{signal.Signals(signum).name}: stopping the job on every host")
        finally:  # whatever the reporter does, the job stops
            session.stop(signum)

    def preempt(signum: int) -> None:
        name = signal.Signals(signum).name
        try:
            note(f"{name}: preemption notice: rank 0 commits a checkpoint now, then the job "
                 "ends")
        finally:
            note(session.preempt(name).describe())

    def handler(act: Callable[[int], None]) -> Callable[[int, FrameType | None], None]:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            threading.Thread(target=act, args=(signum,), name="ringtrain-signal",
                             daemon=True).start()
        return on_signal

    old = {s: signal.signal(s, handler(stop)) for s in STOPS}
    old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, handler(preempt))
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def run(session: Session, recorder: Recorder) -> JobResult:
    """The launch after its assembly: open the run directory (a clear error when it cannot
    be), log the events, answer the signals, run the attempts, then say how the teardown went
    and each restart's recovery."""
    session.open_run_dir()
    events = recorder.events = EventFiles.of(session)
    recorder.note(f"run {session.env.run_id}; run dir {session.run_dir}")
    with answering(session, recorder.note):
        result = session.run()
    events.attempt = lambda: result.attempt  # the lines after it belong to its last attempt
    for text in teardown_lines(result):
        recorder.note(text)
    for incident in incidents(result.attempts):  # the recovery ledger, one line a restart
        recorder.note(f"recovery: {incident.describe()}")
    if result.state is JobState.SUCCEEDED:
        recorder.note(f"job succeeded in {durations(result)}; logs in {session.run_dir}")
    return result


def teardown_lines(result: JobResult) -> tuple[str, ...]:
    dirty = [t for t in result.teardown if not t.clean]
    killed = sum(t.killed for t in result.teardown)
    if not dirty:
        return (f"teardown: ended {killed} leftover process(es); every host verified clean",
                ) if killed else ()
    return tuple(f"teardown: {t.host}: "
                 f"{t.error or 'processes still running: ' + ('; '.join(t.left[:5]) or '-')}"
                 for t in dirty)


def durations(result: JobResult) -> str:
    """The launch's whole time (pre-flight and restarts too), and each attempt's when there
    were several: ``161.2 s in 2 attempts (40.9 s, 110.1 s)``."""
    if len(result.attempts) == 1:
        return f"{result.total_s:.1f} s"
    each = ", ".join(f"{a.duration_s:.1f} s" for a in result.attempts)
    return f"{result.total_s:.1f} s in {len(result.attempts)} attempts ({each})"


def failure_message(result: JobResult) -> str:
    if result.state is JobState.INTERRUPTED:
        return f"job interrupted after {durations(result)} and stopped on every host"
    if result.failure is None:  # pragma: no cover - a failed result always carries one
        return f"the job failed (exit code {result.exit_code}) after {result.duration_s:.1f} s"
    return result.failure.describe(result.attempt)


def preempted(session: Session) -> JobFailed:
    """A preempted job's error: it ended after rank 0's commit (or without one, said)."""
    preemption = session.preemption
    said = preemption.describe() if preemption else "preempted"
    return JobFailed(f"job {said}", f"submit it again with --checkpoint "
                     f"{session.checkpoint.url}: it resumes from the last committed "
                     "checkpoint", exit_code=143)


def failed(session: Session, result: JobResult) -> JobFailed | None:
    """The error a job that did not succeed raises, the same text through both doors; None
    for a job that succeeded."""
    if result.state is JobState.SUCCEEDED:
        return None
    if session.preemption is not None:
        return preempted(session)
    message = failure_message(result) + "\n" + result.what_ringtrain_did()
    hint = result.failure.hint(result.attempt_dir) if result.failure else (
        f"see the logs in {result.attempt_dir}")
    return JobFailed(message, hint, exit_code=result.exit_code)
