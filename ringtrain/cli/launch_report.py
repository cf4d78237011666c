"""What ``ringtrain launch`` says about a job: the dry run's plan, the teardown, and the
root-cause report of a failed or interrupted job."""

from __future__ import annotations

from typing import Any

import click

from ringtrain.assembly import write_plan
from ringtrain.cli.live import LiveView
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.launch.record.result import JobResult, JobState
from ringtrain.launch.reporter import NullReporter
from ringtrain.launch.session import Session


class DryRunReporter(NullReporter):
    """The dry run's pre-flight table and notes go to stderr; the plan alone to stdout."""

    def note(self, text: str) -> None:
        click.echo(f"ringtrain: {text}", err=True)

    def verdict(self, *args: Any) -> None:
        print_verdict(*args, stderr=True)


def dry_run(session: Session) -> None:
    """Print the plan attempt 1 would run: same pre-flight (unless --no-probe), same placement
    and network settings; the probe table goes to stderr, the plan to stdout."""
    plan = write_plan(session)  # the hostfile the argv names exists: it runs as printed
    click.echo(plan.describe())
    session.reporter.note(
        "a real launch adds RINGTRAIN_CONTROL_ADDR and RINGTRAIN_CONTROL_TOKEN for "
        "supervision; the command above also runs as is, unsupervised"
    )


def report_teardown(view: LiveView, result: JobResult) -> None:
    dirty = [t for t in result.teardown if not t.clean]
    killed = sum(t.killed for t in result.teardown)
    if not dirty:
        if killed:
            view.note(f"teardown: ended {killed} leftover process(es); every host verified clean")
        return
    for t in dirty:
        left = "; ".join(t.left[:5]) or "-"
        view.note(f"teardown: {t.host}: {t.error or 'processes still running: ' + left}")


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
