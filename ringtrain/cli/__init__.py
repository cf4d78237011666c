"""Command line. The ``ringtrain.cli`` package is the only place that prints or reads argv.

Each sub-command lives in its own module and exposes one click command (or group) named
``command``; ``_COMMANDS`` maps command names to modules, loaded on first use. Every
RingtrainError is turned into ``error:`` and ``fix:`` lines on stderr and the error's exit
code: a user's mistake never shows a traceback. Under ``--json`` the error also goes to
stdout as a JSON object (jsonout.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from ringtrain.cli import foreign_flags, jsonout, verbosity
from ringtrain.errors import RingtrainError
from ringtrain.version import __version__

# command name -> its module under ringtrain.cli. Modules load only when their command runs
# (or for --help), so `ringtrain launch` does not pay for paramiko, matplotlib or TensorBoard.
_COMMANDS: dict[str, str] = {
    "launch": "launch_cmd",
    "hosts": "hosts_cmd",
    "check": "check_cmd",
    "runs": "runs_cmd",
    "ckpt": "ckpt_cmd",
    "tensorboard": "tensorboard_cmd",
    "sim": "sim_cmd",
    "slurm": "slurm_cmd",
    "pbs": "pbs_cmd",
    "bench": "bench_cmd",
    "config": "config_cmd",
    "completion": "completion_cmd",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is None:
            return None
        command: click.Command = importlib.import_module(f"ringtrain.cli.{module}").command
        return verbosity.add_to(command)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and command is not None:
            jsonout.remember(ctx, name, command, rest)
            if not ctx.resilient_parsing:  # completion and --help's resolution parse leniently
                _refuse_foreign(ctx, name, command, rest)
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RingtrainError as err:
            report_error(err)
            jsonout.report_error(ctx, err)  # --json: the error object on stdout
            ctx.exit(err.exit_code)
        except click.UsageError as err:  # click's own (no such option, a bad value): it prints
            jsonout.report_click_error(ctx, err)  # the usage lines; --json adds the object
            raise


def _refuse_foreign(ctx: click.Context, name: str, command: click.Command,
                    args: list[str]) -> None:
    """Another launcher's flag among the sub-command's options (torchrun's --nproc_per_node,
    mpirun's -x): refused naming its tool, ringtrain's equivalent and the corrected command
    line (cli/foreign_flags.py), before click's own parser would misread it (``-mca`` as
    ``-m ca``) or answer it with a look-alike."""
    takes: dict[str, int] = {}
    helps: set[str] = set()
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        flag = param.is_flag or param.count
        for opt in param.opts:
            takes[opt] = 0 if flag else param.nargs
        for opt in param.secondary_opts:
            takes[opt] = 0
        if param.is_eager and param.expose_value is False and param.name == "help":
            helps.update(param.opts)
    interspersed = command.context_settings.get(
        "allow_interspersed_args", not isinstance(command, click.Group))
    found = foreign_flags.find(args, takes, interspersed=interspersed, helps=frozenset(helps))
    if found is not None:
        raise foreign_flags.refusal(found, name, args, takes)


def report_error(err: RingtrainError) -> None:
    click.secho(f"error: {err.message}", fg="red", err=True)
    if err.hint:
        click.echo(f"  fix: {err.hint}", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ringtrain")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True,
              help="Only warnings and errors from ringtrain (the job's own output still shows).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Launch and supervise Horovod ring all-reduce training across GPU hosts.

    \b
    Typical use:
      ringtrain hosts gpu.txt -np 8        show the inventory and where 8 ranks go
      ringtrain check --hosts gpu.txt      probe every host over SSH (GPUs, versions)
      ringtrain launch --hosts gpu.txt -np 8 train.py --epochs 3
      ringtrain launch --dry-run -H localhost:2 train.py   print the exact plan, run nothing
    """
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(verbosity.level_from(os.environ, verbose))  # LOGLEVEL, -v
    verbosity.set_quiet(quiet)  # as the sub-command's -q (cli/verbosity.py)
    _apply_config(ctx)


def _apply_config(ctx: click.Context) -> None:
    """Defaults from ringtrain.toml, the user's config and RINGTRAIN_<KEY> (assembly/settings.py,
    cli/defaults.py) for the sub-command about to run: the command line still wins."""
    from ringtrain.cli import defaults  # noqa: PLC0415 - after argv parsing

    name = ctx.invoked_subcommand
    if not name or not isinstance(ctx.command, click.Group):
        return
    command = ctx.command.get_command(ctx, name)
    if command is None:
        return
    loaded = defaults.load(ctx)
    for skipped in loaded.skipped if name != "config" else ():  # config lists them itself
        click.echo(f"ringtrain: warning: {skipped.describe()}\n  fix: "
                   f"{skipped.fix(os.geteuid())}", err=True)
    filled = defaults.default_map(loaded.settings, command)
    if filled:
        ctx.default_map = {**(ctx.default_map or {}), name: filled}




def main() -> None:
    try:
        cli.main(prog_name="ringtrain")
    except KeyboardInterrupt:  # pragma: no cover - click turns this into Abort first
        sys.exit(130)
