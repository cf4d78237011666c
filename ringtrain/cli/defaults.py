"""Defaults without flags on the command line: the layers ``assembly/settings.py`` reads (the
project's ``ringtrain.toml``, the user's config file, ``RINGTRAIN_<KEY>``), as click's
``default_map`` for every command that has the option, so ``--help`` shows them; then
``with_layers`` gives a command's options the same values ``ringtrain.run()`` gets from
``assembly.settings.layered``: the command line wins, a host source on it sets the configured
one aside, and the configured ``env`` goes under ``--env``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ringtrain.assembly import settings
from ringtrain.assembly.layers import FILE_ONLY, KEYS, Config, Setting

_META = "ringtrain.config"


def load(ctx: click.Context) -> Config:
    """The layers, read once per command line (kept on the root context)."""
    meta = ctx.find_root().meta
    if _META not in meta:
        meta[_META] = settings.load(Path.cwd(), os.environ)
    loaded: Config = meta[_META]
    return loaded


def default_map(settings: Mapping[str, Setting], command: click.Command) -> dict[str, Any]:
    """click's default_map for ``command``: the settings whose parameter it has, and the same
    for each sub-command of a group (``ringtrain runs show``). ``env`` stays out: it merges
    with ``--env`` (``with_layers``) and its values are not for ``--help``."""
    by_param = {KEYS[k].param: s.value for k, s in settings.items() if k not in FILE_ONLY}
    out: dict[str, Any] = {
        p.name: by_param[p.name] for p in command.params if p.name in by_param
    }
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            nested = default_map(settings, sub)
            if nested:
                out[name] = nested
    return out


def with_layers(ctx: click.Context, options: Mapping[str, Any],
                given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``options`` (a command's parameters by name) with what the command line did not set
    taken from the layers, as ``ringtrain.run()`` takes them; ``given`` adds what the command
    line set through another name (``hosts SOURCE`` is ``--hosts``)."""
    typed = {name: value for name, value in options.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                   ParameterSource.PROMPT)}
    also = {name: value for name, value in (given or {}).items() if value is not None}
    filled = settings.layered({**typed, **also}, load(ctx))
    return {**options, **{k: v for k, v in filled.items() if k in options}}
