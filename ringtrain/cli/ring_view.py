"""How ``check --ring`` and ``launch --ring-check`` show the ring check: a table per host, the
slow hosts and links named with their numbers, the ring's bus bandwidth, where the files are."""

from __future__ import annotations

import statistics
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ringtrain.cli.plain import cell
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.launch.reporter import NullReporter
from ringtrain.ringcheck.intra import describe_intra
from ringtrain.ringcheck.outliers import rate
from ringtrain.ringcheck.picture import heat_map
from ringtrain.ringcheck.runner import RingCheck


def show_ring_check(check: RingCheck, *, stderr: bool = False) -> None:
    v = check.verdict
    pairs = check.pairs
    table = Table(title=f"ring check: {len(v.hosts)} hosts, {len(pairs)} pairs in "
                        f"{check.raw.get('rounds', '?')} rounds", header_style="bold")
    for col in ("HOST", "MEDIAN PAIR", "WORST PAIR", "SLOW PAIRS", "LATENCY", "VERDICT"):
        table.add_column(col)
    for i, s in enumerate(v.scores):
        own = [p for p in pairs if i in (p.a, p.b)]
        worst = min(own, key=lambda p: p.bandwidth_Bps) if own else None
        lat = statistics.median(p.latency_s for p in own) if own else None
        peer = (v.hosts[worst.b if worst.a == i else worst.a]) if worst else "-"
        table.add_row(  # host names from the inventory's file: text, never markup
            cell(s.host), rate(s.median_Bps) if own else "-",
            cell(f"{rate(worst.bandwidth_Bps)} ({peer})") if worst else "-",
            f"{s.slow_pairs}/{s.pairs}", f"{lat * 1e6:.0f} us" if lat is not None else "-",
            "SLOW" if s.slow else "ok", style="red" if s.slow else None,
        )
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)
    console.print(table)
    echo = click.echo
    echo(f"reference: {rate(v.reference_Bps)} ({v.reference_kind}); a pair below "
         f"{v.slow_ratio:g} of it is slow; spread (MAD) {rate(v.mad_Bps)}", err=stderr)
    if v.ring_busbw_Bps:
        echo(f"ring all-reduce bus bandwidth: {rate(v.ring_busbw_Bps)}", err=stderr)
    for line in v.describe():
        click.secho(line, fg="red", err=stderr)
    for note in v.notes:
        echo(f"note: {note}", err=stderr)
    for line in describe_intra(check.intra):
        echo(f"GPU-to-GPU: {line}", err=stderr)
    if v.healthy:
        echo("no slow host or link", err=stderr)
    png, picture = heat_map(v, pairs), None
    if png is not None and check.files is not None:
        try:
            check.files.write("ringcheck.png", png, mode=0o644)
            picture = check.run_dir / "ringcheck.png"
        except OSError as err:
            echo(f"warning: cannot write ringcheck.png in {check.run_dir}: {err}", err=stderr)
    files = f"{check.run_dir}/ringcheck.json" + (f", {picture}" if picture else "")
    echo(f"measurements: {files}", err=stderr)


class RingReporter(NullReporter):
    """The ring check's own job: its notes on stderr, its ranks' output only in its logs."""

    def note(self, text: str) -> None:
        if "--no-probe" in text:  # the hosts were probed just before; the ring job skips it
            return
        click.echo(f"ringtrain: ring check: {text}", err=True)

    def verdict(self, *args: Any) -> None:
        print_verdict(*args, stderr=True)
