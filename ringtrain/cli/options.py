"""Helpers for option sets shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def stacked(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator applying ``decorators`` as if written top to bottom above the function
    (click shows options in that order)."""

    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


def ring_check_options(flag: str) -> Callable[[F], F]:
    """The ring check's options, shared by ``check --ring`` and ``launch --ring-check``."""
    return stacked(
        click.option(flag, "ring_check", is_flag=True,
                     help="After the probe, measure every host pair's bandwidth and latency "
                     "with real MPI traffic (N-1 rounds of disjoint pairs) and the ring "
                     "all-reduce over all hosts; name a slow host or link."),
        click.option("--expect-link", metavar="RATE",
                     help="The links' rate (25gbit, 100mbit, 3GB/s): pairs are compared with "
                     "it, not with the measured median."),
        click.option("--slow-ratio", type=click.FloatRange(0.01, 1.0), default=0.5,
                     show_default=True,
                     help="A pair below this fraction of the reference rate is slow."),
        click.option("--on-slow-host", type=click.Choice(["warn", "exclude"]), default="warn",
                     show_default=True,
                     help="A slow host found by the ring check is reported, or left out."),
    )
