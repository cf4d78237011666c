"""``ringtrain tensorboard RUN``: serve the TensorBoard logs rank 0 wrote into a run directory.

RUN is a run id under --runs-dir, ``latest``, or a path to a run directory. The command replaces
itself with ``tensorboard --logdir RUN/tensorboard`` (exec: no child process to manage, Ctrl-C
stops TensorBoard directly). It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from ringtrain.errors import SetupError, UsageError

_EPILOG = """\b
Examples:
  ringtrain tensorboard latest
  ringtrain tensorboard 20261121-201015-cb6f --port 6007
  ringtrain tensorboard runs/20261121-201015-cb6f --print-command
"""


def resolve_run(run: str, runs_dir: Path) -> Path:
    """A run directory from an id, ``latest`` or a path."""
    if run == "latest":
        # launch runs only (they have attempt dirs); bench-* runs share the folder
        runs = sorted(p.parent for p in runs_dir.glob("*/attempt-1")) if runs_dir.is_dir() else []
        if not runs:
            raise UsageError(f"no runs under {runs_dir}", "launch a job first, or pass --runs-dir")
        return runs[-1]
    for candidate in (Path(run), runs_dir / run):
        if candidate.is_dir():
            return candidate
    raise UsageError(
        f"no run {run!r} (neither a directory nor a run id under {runs_dir})",
        f"pick one of: ls {runs_dir}, or pass latest",
    )


def find_tensorboard() -> str:
    here = Path(sys.executable).parent / "tensorboard"
    found = str(here) if here.is_file() else shutil.which("tensorboard")
    if not found:
        raise SetupError(
            "tensorboard is not installed", "pip install tensorboard (ringtrain[train] has it)"
        )
    return found


@click.command("tensorboard", epilog=_EPILOG)
@click.argument("run")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=6006, show_default=True)
@click.option("--print-command", is_flag=True, help="Print the tensorboard command; run nothing.")
def command(run: str, runs_dir: Path, host: str, port: int, print_command: bool) -> None:
    """Serve the TensorBoard logs of RUN (an id under --runs-dir, latest, or a directory)."""
    logdir = (resolve_run(run, runs_dir) / "tensorboard").absolute()
    if not logdir.is_dir():
        raise UsageError(
            f"{logdir} does not exist: this run wrote no TensorBoard logs",
            "rank 0 of ringtrain/models/digits.py writes them; other scripts must log to "
            "$RINGTRAIN_RUN_DIR/tensorboard",
        )
    argv = [find_tensorboard(), "--logdir", str(logdir), "--host", host, "--port", str(port)]
    if print_command:
        click.echo(shlex.join(argv))
        return
    click.echo(f"ringtrain: serving {logdir} at http://{host}:{port}/", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)  # noqa: S606 - argv list, no shell
