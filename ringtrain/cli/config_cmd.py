"""``ringtrain config``: the defaults in effect and where each came from (both doors read the
same layers: assembly/settings.py). The variables for the ranks show by name, never by value."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import click

from ringtrain.assembly import LaunchOptions, settings
from ringtrain.assembly.layers import shown
from ringtrain.cli import defaults

_EPILOG = """\b
Sources, highest first: the command line (or ringtrain.run()'s arguments), RINGTRAIN_<KEY>
environment variables, the project's ringtrain.toml (this directory or the nearest parent),
the user's ~/.config/ringtrain/config.toml ($XDG_CONFIG_HOME), then ringtrain's built-in
defaults. A relative path in a file is taken from that file's folder.

\b
Example ringtrain.toml:
  hosts = "hosts/cluster.yaml"
  ssh_config = "~/.ssh/cluster_config"
  runs_dir = "/scratch/ringtrain/runs"
  stall_timeout = 900
  env = { NCCL_DEBUG = "WARN", WANDB_API_KEY = "..." }
  env_file = ".ringtrain_env"
"""


# what a key's built-in default does where it is no value (LaunchOptions' None or nothing)
_UNSET = {
    "hosts": "Slurm/PBS, else local",
    "hosts_format": "detected",
    "ssh_config": "~/.ssh/config",
    "known_hosts": "~/.ssh/known_hosts",
    "trust_groups": "none",
    "python": "this one",
    "network_interface": "chosen by the probe",
    "checkpoint": "none",
    "stall_timeout": "600 once progress shows",
    "env_file": "none",
}


def _built_in(value: Any) -> str | None:
    """The built-in default as the table shows it; None where it is no value."""
    if value is None or value is dataclasses.MISSING or value == ():
        return None
    return shown(value)


@click.command("config", epilog=_EPILOG)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """Show the defaults in effect: each key, its value and where it came from."""
    loaded = defaults.load(ctx)
    found = loaded.settings
    built_in = {f.name: f.default for f in dataclasses.fields(LaunchOptions)}
    rows = [
        {"key": key, "value": shown(found[key].value) if key in found else _built_in(
            built_in.get(spec.param)), "source": found[key].source if key in found
         else "built-in default", "means": spec.means}
        for key, spec in settings.KEYS.items() if key not in ("env", "env_plain")
    ]
    rows += [{"key": f"env.{e.spec.name}", "value": e.masked(), "source": e.source,
              "means": "a variable for every rank" + ("" if e.spec.plain else
                                                         " (a secret: value not shown)")}
             for e in loaded.env]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(str(r["key"])) for r in rows)
    for row in rows:
        value = row["value"] if row["value"] is not None else f"({_UNSET[str(row['key'])]})"
        click.echo(f"{row['key']:<{width}}  {value:<28}  {row['source']}")
    project = loaded.project
    click.echo(f"\nproject file: {project or 'none (' + settings.PROJECT_FILE + ' not found)'}")
    click.echo(f"user file:    {settings.user_file(os.environ)}")
    for skipped in loaded.skipped:
        click.echo(f"{skipped.describe()}\n  fix: {skipped.fix(os.geteuid())}")
