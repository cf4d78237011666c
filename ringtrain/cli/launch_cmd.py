"""``ringtrain launch``: inventory -> allocation -> plan -> run, with the plan printable as is."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from ringtrain.assembly import LaunchOptions, build_spec, prepare
from ringtrain.cli import jsonout, launch_entry, launch_report, launch_signals, verbosity
from ringtrain.cli.context import cli_context
from ringtrain.cli.defaults import with_layers
from ringtrain.cli.launch_flags import launch_flags
from ringtrain.cli.live import LiveView
from ringtrain.launch import lifecycle
from ringtrain.launch.lifecycle import Recorder
from ringtrain.launch.session import Session


@launch_flags
@click.pass_context
def command(
    ctx: click.Context,
    /,
    dry_run: bool,
    from_run: Path | None,
    console_ranks: frozenset[int] | None,
    json_out: bool,
    requeue: bool,
    **options: Any,
) -> None:
    """Train SCRIPT on every rank with Horovod: resolve hosts, plan, run and supervise.

    SCRIPT is a Python file (train.py), or any program (a wrapper script, a binary); -m MODULE
    runs a module. `python train.py` and `python -m pkg.train`, as horovodrun takes them, work
    too. Options end at SCRIPT (or at --): everything after it is the script's own."""
    options["env"] = (*options["env"], *options.pop("env_plain"))  # one list, each marked
    if from_run:
        spec = launch_entry.spec_from_run(ctx, from_run)
    else:
        launch_entry.refuse_unknown_option(ctx, options)
        options = with_layers(ctx, options)  # as ringtrain.run() fills them
        options["mpi_args"] = (*options["mpi_args"], *options.pop("mpi_args_line"))
        spec = build_spec(LaunchOptions(**options), Path.cwd())
    requeue_job = launch_signals.check_requeue(spec, os.environ) if requeue else None
    factory = cli_context().remote_factory
    if dry_run:
        reporter = launch_report.DryRunReporter()
        launch_report.dry_run(prepare(spec, reporter, os.environ, remote_factory=factory,
                                      dry_run=True))
        return
    view = LiveView(console_ranks=console_ranks, quiet=verbosity.quiet(),
                    rank_stream=sys.stderr if json_out else None)
    recorder = Recorder(view)  # the events files, as under ringtrain.run()
    try:
        session = prepare(spec, recorder, os.environ, remote_factory=factory)
    except BaseException:
        view.flush()  # its notes before the error lines the CLI prints
        raise
    _run(session, view, recorder, json_out=json_out, requeue_job=requeue_job)


def _run(session: Session, view: LiveView, recorder: Recorder, *, json_out: bool = False,
         requeue_job: str | None = None) -> None:
    """The run below both doors (launch/lifecycle.py), drawn; then the result as JSON under
    --json, and the error of a job that did not succeed."""
    view.start()
    try:
        result = lifecycle.run(session, recorder)
    finally:
        view.stop()
    if json_out:  # the run's result.json (every attempt, the checkpoint), else this attempt's
        view.flush()
        try:
            text = session.open_run_dir().read_text("result.json")
        except OSError:
            text = json.dumps(result.run_json(), indent=2)
        jsonout.echo(text)
    view.flush()  # the notes before the error lines the CLI prints
    if session.preemption is not None:
        raise launch_signals.after_preemption(session, view.note, requeue_job)
    failed = lifecycle.failed(session, result)
    if failed is not None:
        raise failed
