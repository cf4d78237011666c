"""``ringtrain launch``'s own command-line checks: a misspelt option refused with a
suggestion (options end at SCRIPT), and ``--from RUN_DIR`` taking no other option. Telling a
script from a module or a program is the assembly's (ringtrain/assembly/entry_kind.py)."""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path
from typing import Any

import click

from ringtrain.assembly.entry_kind import differences, read_run_spec
from ringtrain.errors import UsageError
from ringtrain.spec import LaunchSpec


def refuse_unknown_option(ctx: click.Context, options: dict[str, Any]) -> None:
    """Options end at SCRIPT, so a misspelt option would be taken for the script: say
    "no such option" with click's suggestion instead of "script not found"."""
    script = options.get("script")
    if options.get("module") is not None or not script or not script.startswith("-"):
        return
    if Path(script).is_file():  # a script named -x.py, given after --
        return
    name = script.partition("=")[0]
    known = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)
             if o.startswith("-")]
    raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, known), ctx=ctx)


def spec_from_run(ctx: click.Context, run_dir: Path) -> LaunchSpec:
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name not in ("from_run", "dry_run", "script_args")
        and ctx.get_parameter_source(p.name or "") is click.core.ParameterSource.COMMANDLINE
    ]
    if given or ctx.params.get("script_args"):
        raise UsageError(
            f"--from reruns the launch recorded in {run_dir}; it takes no "
            f"{' '.join(given) or 'script arguments'}",
            "drop those options, or launch without --from and write every option out",
        )
    spec = read_run_spec(run_dir)
    click.echo(f"ringtrain: launching again what {run_dir} ran ({spec.script})", err=True)
    for line in differences(spec):
        click.echo(f"ringtrain:   {line}", err=True)
    return spec


def split_mpi_args(value: str | None, option: str = "--mpi-args") -> tuple[str, ...]:
    """``--mpi-args "-mca btl ^openib"`` -> its words, split as a shell would (horovodrun's
    one-string form); quotes that do not close are a clear error, not a guess."""
    if value is None:
        return ()
    try:
        return tuple(shlex.split(value))
    except ValueError as err:
        raise click.BadParameter(f"{value!r}: {err} (quote each argument that has spaces "
                                 "once)", param_hint=option) from None


def split_srun_args(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--srun-args "--cpu-bind=cores --gpus-per-task=1"``, split as a shell would."""
    return tuple(w for value in values for w in split_mpi_args(value, "--srun-args"))
