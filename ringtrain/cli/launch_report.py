"""What ``ringtrain launch --dry-run`` says: the plan attempt 1 would run. (A running job's
lines and its error are the same through both doors: launch/lifecycle.py.)"""

from __future__ import annotations

from typing import Any

import click

from ringtrain.assembly import write_plan
from ringtrain.cli.verdict_view import print_verdict
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
