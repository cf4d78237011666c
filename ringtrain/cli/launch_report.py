"""What ``ringtrain launch`` says about a job: the dry run's plan, the teardown, and the
root-cause report of a failed or interrupted job."""

from __future__ import annotations

from typing import Any

import click

from ringtrain.assembly import write_plan
from ringtrain.cli.live import LiveView
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.launch.reporter import NullReporter
from ringtrain.launch.result import JobResult, JobState
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


def failure_message(result: JobResult) -> str:
    if result.state is JobState.INTERRUPTED:
        return f"job interrupted after {result.duration_s:.1f} s and stopped on every host"
    if result.failure is None:  # pragma: no cover - a failed result always carries one
        return f"the job failed (exit code {result.exit_code}) after {result.duration_s:.1f} s"
    return result.failure.describe(result.attempt)


def what_ringtrain_did(session: Session, result: JobResult) -> str:
    """The second half of the root-cause report: teardown, attempts, the resume point."""
    clean = [t.host for t in result.teardown if t.clean]
    unverified = [t.host for t in result.teardown if not t.clean]
    did = f"ringtrain: tore the job down; {len(clean)} host(s) verified clean"
    if unverified:
        did += f", not verified: {', '.join(unverified)}"
    did += f". Attempt {result.attempt} of {session.spec.restart.max_restarts + 1}"
    if result.state is JobState.INTERRUPTED:
        did += " (stopped by the user: no restart)"
    else:
        asked = session.spec.restart.max_restarts
        did += " (restarts used up)" if asked else " (no restart asked)"
    ckpt = session.last_checkpoint
    if ckpt and "error" in ckpt:
        did += (
            f". Could not list the checkpoints at {ckpt['url']} ({ckpt['error']}); a relaunch "
            f"with --checkpoint {ckpt['url']} resumes from the newest one that verifies."
        )
    elif ckpt:
        did += (
            f". Last committed checkpoint: step {ckpt['step']} (epoch {ckpt['epoch']}) at "
            f"{ckpt['url']}; a relaunch with --checkpoint {ckpt['url']} resumes there."
        )
    else:
        did += ". No committed checkpoint."
    return did
