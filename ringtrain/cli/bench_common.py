"""What the ``ringtrain bench`` commands share: the examples, the line per measured round,
and SIGTERM turned into an orderly exit (jobs stopped, links unshaped)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the bench modules need numpy (the [bench] extra): imported when run
    from ringtrain.bench.allreduce import harness

EPILOG = """\b
Examples:
  ringtrain bench allreduce -n 2 --sizes 4K..256M
  ringtrain bench ps -n 2 -k 1,2 --sizes 4K..64M
  ringtrain bench compare -n 2 -k 1,2                         local slots
  sudo ringtrain bench compare --sim rtbench --link-rate 200mbit --sizes 1M..16M
       -n 2,4,8 --ps-workers 2,4 -k 1..4 --impl mpi4py,mpi4py-ring,horovod,gloo
       --target-pairs 0                       (one command: simulated hosts, shaped links)
  ringtrain bench model runs/bench-<id>       refit, print fits and crossovers
  ringtrain bench report runs/bench-<id>      rewrite report.md, cells.csv and plots
  ringtrain bench tune -n 2                   Horovod vs mpi4py tuning ladder
  ringtrain bench train --model resnet50 -n 1,2
  ringtrain bench train --strategy horovod,tf-multiworker,tf-ps --ps 1,2 --model dense -n 2
  ringtrain bench project                     Horovod's 512-GPU benchmark from public inputs
"""


def echo_round(rnd: harness.Round) -> None:
    state = "ok" if rnd.accepted else f"kept after {rnd.attempts} attempts (disturbed)"
    click.echo(f"  {rnd.label}: {rnd.seconds:.1f} s, foreign CPU {100 * rnd.foreign:.0f}%, "
               f"drift {100 * rnd.drift:.0f}% [{state}]", err=True)


@contextlib.contextmanager
def terminable() -> Iterator[None]:
    """SIGTERM raises SystemExit, so running jobs are stopped and links unshaped on the way."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
