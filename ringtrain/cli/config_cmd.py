"""``ringtrain config``: the defaults in effect and where each came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ringtrain.cli import defaults as config

_EPILOG = """\b
Sources, highest first: the command line, RINGTRAIN_<KEY> environment variables, the
project's ringtrain.toml (this directory or the nearest parent), the user's
~/.config/ringtrain/config.toml ($XDG_CONFIG_HOME), then ringtrain's built-in defaults.

\b
Example ringtrain.toml:
  hosts = "hosts/cluster.yaml"
  ssh_config = "~/.ssh/cluster_config"
  runs_dir = "/scratch/ringtrain/runs"
  stall_timeout = 900
"""


@click.command("config", epilog=_EPILOG)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def command(as_json: bool) -> None:
    """Show the defaults in effect: each key, its value and where it came from."""
    loaded = config.load(Path.cwd(), os.environ)
    settings = loaded.settings
    rows = [
        {"key": key, "value": None if key not in settings else str(settings[key].value),
         "source": settings[key].source if key in settings else "built-in default",
         "means": means}
        for key, (_param, _kind, means) in config.KEYS.items()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(k) for k in config.KEYS)
    for row in rows:
        value = row["value"] if row["value"] is not None else "-"
        click.echo(f"{row['key']:<{width}}  {value:<28}  {row['source']}")
    project = loaded.project
    click.echo(f"\nproject file: {project or 'none (' + config.PROJECT_FILE + ' not found)'}")
    click.echo(f"user file:    {config.user_file(os.environ)}")
    for skipped in loaded.skipped:
        click.echo(f"{skipped.describe()}\n  fix: {skipped.fix(os.geteuid())}")
