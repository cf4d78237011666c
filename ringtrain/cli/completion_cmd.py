"""``ringtrain completion bash|zsh|fish``: the shell completion script for ringtrain.

Click's own: the script calls ``ringtrain`` back with ``_RINGTRAIN_COMPLETE`` set, and the
command group answers with the sub-commands, options and choices (sub-command modules load
as for ``--help``).
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_RINGTRAIN_COMPLETE"  # click's name for prog "ringtrain": _{PROG}_COMPLETE

_EPILOG = """\b
Install (then open a new shell):
  bash:  ringtrain completion bash > ~/.local/share/bash-completion/completions/ringtrain
  zsh:   ringtrain completion zsh > "${fpath[1]}/_ringtrain"
  fish:  ringtrain completion fish > ~/.config/fish/completions/ringtrain.fish
or, evaluated at each start:  eval "$(ringtrain completion bash)"  (in ~/.bashrc; zsh: ~/.zshrc)
"""


@click.command("completion", epilog=_EPILOG)
@click.argument("shell", type=click.Choice(SHELLS))
def command(shell: str) -> None:
    """Print the completion script for SHELL (bash 4.4+, zsh or fish)."""
    from ringtrain.cli import cli  # noqa: PLC0415 - the group that imports this module

    completion = get_completion_class(shell)
    if completion is None:  # pragma: no cover - click knows the three SHELLS
        raise click.BadParameter(f"click has no completion for {shell}")
    click.echo(completion(cli, {}, "ringtrain", COMPLETE_VAR).source())
