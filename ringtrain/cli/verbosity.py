"""``-v``/``-q`` on every sub-command, where users type them (``ringtrain launch -v ...``), as
well as before it (``ringtrain -v launch``, ``ringtrain -q launch``). Added by the command
group to each command it loads; a command that already uses ``-q`` for something else
(``pbs submit -q QUEUE``, qsub's own spelling) keeps it and gets ``--quiet`` alone.

Without -v/-q, ``LOGLEVEL`` (torchrun's variable: DEBUG, INFO, WARNING, ERROR or CRITICAL, any
case) sets ringtrain's own log level; -v/-q on the command line win over it. A value that is
not a level is refused, naming the variable and the values it takes."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import click

from ringtrain.errors import UsageError

_state = {"quiet": False}
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
          "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}
_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}  # logging's own spellings


def level_from(environ: Mapping[str, str], verbose: int = 0) -> int:
    """ringtrain's log level before a sub-command's -v/-q: ``-v`` (counted) on the group, else
    ``LOGLEVEL``, else WARNING. A bad LOGLEVEL is a UsageError even when -v is given."""
    text = environ.get("LOGLEVEL", "").strip()
    name = _ALIASES.get(text.upper(), text.upper())
    if text and name not in LEVELS:
        raise UsageError(
            f"LOGLEVEL={text!r} is not a log level",
            f"set LOGLEVEL to one of {', '.join(LEVELS)} (any case), or unset it "
            "(-v/-q set ringtrain's level on the command line)",
        )
    if verbose:
        return max(logging.WARNING - 10 * verbose, logging.DEBUG)
    return LEVELS[name] if name else logging.WARNING


def quiet() -> bool:
    """Whether ``-q`` was given: ringtrain's status lines go to the run's events.log only."""
    return _state["quiet"]


def _verbose(_ctx: click.Context, _param: click.Parameter, count: int) -> None:
    if count:
        logging.getLogger().setLevel(max(logging.WARNING - 10 * count, logging.DEBUG))


def set_quiet(value: bool) -> None:
    """``-q`` before the sub-command (``ringtrain -q launch``; the group sets it either way, so
    one command line's -q does not outlive it) or on it."""
    _state["quiet"] = value
    if value:
        logging.getLogger().setLevel(logging.ERROR)


def _quiet(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        set_quiet(True)


def add_to(command: click.Command) -> click.Command:
    """Give ``command`` (and a group's sub-commands) -v/--verbose and -q/--quiet unless it has
    them (idempotent)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_to(sub)
    taken = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    if "--verbose" not in taken:
        command.params.append(click.Option(
            ["-v", "--verbose"] if "-v" not in taken else ["--verbose"], count=True,
            expose_value=False, callback=_verbose, help="More log output (-vv: debug)."))
    if "--quiet" not in taken:
        command.params.append(click.Option(
            ["-q", "--quiet"] if "-q" not in taken else ["--quiet"], is_flag=True,
            expose_value=False, callback=_quiet,
            help="Only warnings and errors from ringtrain (the job's own output still shows)."))
    return command
