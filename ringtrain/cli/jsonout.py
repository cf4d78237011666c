"""``--json`` (launch, check, hosts): stdout carries one JSON document. It is the command's
report, or, when the command fails before writing it (a bad host file, an unknown host, a
config error), the error as an object::

    {"error": {"code": "inventory", "message": "...", "fix": "...", "exit_code": 2}}

with the same exit code as without ``--json``; stderr keeps the ``error:``/``fix:`` lines.
click's own usage errors (no such option, a bad value) are such an object too, code ``usage``.
A command whose report is already out (``check --json`` that refuses, ``launch --json`` of a
failed job: result.json) adds nothing: stdout stays one document.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from ringtrain.errors import RingtrainError, UsageError

_PENDING = "ringtrain.cli.pending"  # ctx.meta: (name, command, args) of the sub-command
_WRITTEN = "ringtrain.cli.json_written"  # ctx.meta: the command wrote its JSON document


def error_object(err: RingtrainError) -> dict[str, Any]:
    return {"error": {"code": err.code, "message": err.message, "fix": err.hint,
                      "exit_code": err.exit_code}}


def echo(text: str, *, nl: bool = True) -> None:
    """Print the command's JSON document on stdout (and remember that it is out)."""
    click.get_current_context().meta[_WRITTEN] = True
    click.echo(text, nl=nl)


def remember(ctx: click.Context, name: str, command: click.Command,
             args: Sequence[str]) -> None:
    """The group's sub-command and its arguments, before they are parsed (an error in the
    group's own callback, ringtrain.toml's, comes before the sub-command sees --json)."""
    ctx.meta[_PENDING] = (name, command, tuple(args))


def report_error(ctx: click.Context, err: RingtrainError) -> None:
    """On stdout, the error object when the sub-command asked for --json and has not written
    its document yet."""
    if not ctx.meta.get(_WRITTEN) and _asked(ctx):
        click.echo(json.dumps(error_object(err), indent=2))


def report_click_error(ctx: click.Context, err: click.UsageError) -> None:
    """The same for click's own usage errors (no such option, a bad value): the object says
    what click says, with code ``usage`` and click's exit code (2)."""
    if ctx.meta.get(_WRITTEN) or not _asked(ctx):
        return
    where = err.ctx.command_path if err.ctx is not None else ctx.command_path
    error = error_object(UsageError(err.format_message(), f"see '{where} --help'"))
    error["error"]["exit_code"] = err.exit_code
    click.echo(json.dumps(error, indent=2))


def _asked(ctx: click.Context) -> bool:
    """Whether the sub-command's --json is on: its arguments parsed again, leniently (every
    value, config defaults included, as the command saw them; nothing is run). A command
    whose options may follow its arguments (``check``, ``hosts``) also counts a --json
    that a bad option before it kept the lenient parse from reaching."""
    pending = ctx.meta.get(_PENDING)
    if pending is None:
        return False
    name, command, args = pending
    flag = next((p for p in command.params if "--json" in p.opts), None)
    if flag is None or flag.name is None:
        return False
    if command.context_settings.get("allow_interspersed_args", True) and "--json" in (
            args[:args.index("--")] if "--" in args else args):
        return True
    try:
        sub = command.make_context(name, list(args), parent=ctx, resilient_parsing=True)
    except (click.exceptions.ClickException, click.exceptions.Exit, RingtrainError):
        return False
    return bool(sub.params.get(flag.name))
