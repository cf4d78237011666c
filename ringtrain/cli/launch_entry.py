"""What ``ringtrain launch`` runs on every rank, read from its command line: a misspelt option
refused with a suggestion, a Python script told from a module or a program, ``--from RUN_DIR``
read back."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ringtrain.errors import UsageError
from ringtrain.launch.plan import read_recorded_spec
from ringtrain.spec import Entry, LaunchSpec


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


def resolve_entry(spec: LaunchSpec) -> LaunchSpec:
    """Tell a Python script from a program, and refuse what is not there: a SCRIPT that is an
    executable file without a Python #! line, or a bare name found on PATH, is a program."""
    if spec.entry is Entry.MODULE:
        top = spec.script.partition(".")[0]
        if spec.python is None and not (
            (spec.working_dir / top).is_dir() or (spec.working_dir / f"{top}.py").is_file()
            or importlib.util.find_spec(top) is not None
        ):
            raise UsageError(
                f"module {spec.script!r} not found: no {top}/ or {top}.py in "
                f"{spec.working_dir} and no installed {top!r}",
                "run from the directory that holds the package, or install it",
            )
        return spec
    path = spec.working_dir / spec.script
    if path.is_file():
        if path.suffix != ".py" and os.access(path, os.X_OK) and not _python_shebang(path):
            return replace(spec, entry=Entry.EXECUTABLE, script=str(path))
        return spec
    if "/" not in spec.script and shutil.which(spec.script):
        return replace(spec, entry=Entry.EXECUTABLE)
    raise UsageError(
        f"script {spec.script!r} not found in {spec.working_dir}",
        "give the path of a training script (or -m MODULE, or a program on PATH)",
    )


def _python_shebang(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


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
    candidates = [run_dir / "attempt-1" / "plan.json", run_dir / "plan.json"]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise UsageError(
            f"--from {run_dir}: no plan.json there (looked for attempt-1/plan.json)",
            "pass a run directory, e.g. runs/20261124-010203-ab12 (see `ringtrain runs`)",
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read {path}: {err}", "pass another run directory") from err
    spec = read_recorded_spec(data)
    click.echo(f"ringtrain: launching again what {run_dir} ran ({spec.script})", err=True)
    return spec
