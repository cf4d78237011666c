"""``ringtrain bench campaign``: a fault every N seconds through one long run per way back
(restart, elastic, the three ringtrain.keras lines, with a spare) against ``horovodrun
--elastic``, on a simulated cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

import click

# bench/launcher/campaign.py's (a test checks)
MODES = ("restart", "elastic", "memory", "spare", "cold-spare", "horovodrun", "clean")


@click.command("campaign", epilog="""\b
Examples:
  sudo ringtrain bench campaign --out campaign      a fault every 60 s, then every 30 s
  sudo ringtrain bench campaign --modes memory,horovodrun,clean --incidents 6 --intervals 30
""")
@click.option("--modes", default="restart,memory,spare,horovodrun,clean", show_default=True,
              help="Ways back: restart (--max-restarts), elastic (hvd.elastic.run), memory "
              "(--elastic, the three ringtrain.keras lines), spare (memory with a fourth host "
              "held as a warm spare), cold-spare (the same, --cold-spares), horovodrun "
              "(horovodrun --elastic, the anchor), clean (memory, no faults, run once: the "
              "accuracy to compare with).")
@click.option("--incidents", type=click.IntRange(min=0), default=0, show_default=True,
              help="Faults per run at most; 0: one every interval until the job ends.")
@click.option("--intervals", "--interval", default="60,30", show_default=True,
              help="Seconds between faults (kill -9, link down, stall, in turn), one run per "
              "mode and rate, each rate its own table; at least 5 each.")
@click.option("--epochs", type=click.IntRange(min=2), default=40, show_default=True)
@click.option("--steps-per-epoch", type=click.IntRange(min=2), default=100, show_default=True)
@click.option("--link-down", type=click.FloatRange(min=1), default=20.0, show_default=True,
              help="Seconds a host's link stays down.")
@click.option("--stall", type=click.FloatRange(min=0.5), default=4.0, show_default=True,
              help="Seconds a straggler's processes stay stopped.")
@click.option("--gloo-timeout-seconds", type=click.IntRange(min=0), default=0,
              show_default=True, help="Every mode's Gloo timeout, the anchor's too; 0: none "
              "given, each launcher's default (Horovod's 30 s), as a user meets it.")
@click.option("--fallback-restarts", type=click.IntRange(min=0), default=0, show_default=True,
              help="ringtrain's elastic modes (not the anchor) also get --max-restarts N: a "
              "fault elastic cannot absorb restarts the job from its last checkpoint.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep campaign.json (every incident) and campaign.png here.")
def campaign_cmd(modes: str, incidents: int, intervals: str, epochs: int,
                 steps_per_epoch: int, link_down: float, stall: float,
                 gloo_timeout_seconds: int, fallback_restarts: int, out: Path | None) -> None:
    """A campaign of faults (needs root): 3 ranks on a 4-host simulated cluster train for
    EPOCHS x STEPS batches while a fault hits a host other than the first every INTERVAL
    seconds. Per way back and rate: time back by fault kind, the wall time lost to the
    faults, to start-up and end and to neither (together wall x (1 - ETTR)), the effective
    training time ratio, final accuracy against the fault-free run's, and how the job ended."""
    from ringtrain.bench.launcher import campaign  # noqa: PLC0415 - starts a cluster

    unknown = set(modes.split(",")) - set(MODES)
    if unknown:
        raise click.BadParameter(f"{', '.join(sorted(unknown))}: choose from {', '.join(MODES)}",
                                 param_hint="--modes")
    try:
        campaign.parse_intervals(intervals)
    except argparse.ArgumentTypeError as err:
        raise click.BadParameter(str(err), param_hint="--intervals") from None
    raise SystemExit(campaign.main([
        "--modes", modes, "--incidents", str(incidents), "--intervals", intervals,
        "--epochs", str(epochs), "--steps-per-epoch", str(steps_per_epoch),
        "--link-down", str(link_down), "--stall", str(stall),
        "--gloo-timeout-seconds", str(gloo_timeout_seconds),
        "--fallback-restarts", str(fallback_restarts),
        *(["--out", str(out)] if out is not None else [])]))
