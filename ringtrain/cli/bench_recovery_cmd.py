"""``ringtrain bench recovery``: time to training again after a killed rank, by restart, by
``--elastic`` and by ``horovodrun --elastic`` (the anchor), on a simulated cluster."""

from __future__ import annotations

import click

# bench/launcher/recovery.py's (a test checks)
MODES = ("restart", "elastic", "memory", "horovodrun")


@click.command("recovery", epilog="""\b
Examples:
  sudo ringtrain bench recovery                       one incident per mode
  sudo ringtrain bench recovery --repeats 3 --modes elastic,horovodrun
  sudo ringtrain bench recovery --modes memory --ranks 3,8 --repeats 5
  sudo ringtrain bench recovery --modes memory,horovodrun --gloo-timeout-seconds 5
""")
@click.option("--modes", default=",".join(MODES), show_default=True,
              help="Which ways back to run: restart (ringtrain --max-restarts), elastic "
              "(ringtrain --elastic, a script with hvd.elastic.run), memory (ringtrain "
              "--elastic, a plain script with the three ringtrain.keras lines), horovodrun "
              "(horovodrun --elastic, the anchor).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Incidents per mode and world size: the rank on the last host is killed "
              "first, then the one on the host before it, and so on.")
@click.option("--ranks", default="3", show_default=True, metavar="N[,N...]",
              help="World sizes, one rank per simulated host (at least 3): 3,8 runs each "
              "incident at 3 and at 8 ranks.")
@click.option("--epochs", type=click.IntRange(min=2), default=6, show_default=True)
@click.option("--steps-per-epoch", type=click.IntRange(min=2), default=16, show_default=True)
@click.option("--pause", type=click.FloatRange(min=0), default=0.1, show_default=True,
              help="Seconds each batch sleeps (a stand-in for a GPU's step time).")
@click.option("--commit", type=click.IntRange(min=1), default=4, show_default=True,
              help="Elastic modes: batches between in-memory commits.")
@click.option("--kill-at", type=click.IntRange(min=1), default=40, show_default=True,
              help="Batches trained before a rank is killed.")
@click.option("--gloo-timeout-seconds", type=click.IntRange(min=1), default=None,
              help="Every mode's Gloo timeout (Horovod's default: 30): how long a survivor "
              "waits on a lost peer.")
def recovery_cmd(modes: str, repeats: int, ranks: str, epochs: int, steps_per_epoch: int,
                 pause: float, commit: int, kill_at: int,
                 gloo_timeout_seconds: int | None) -> None:
    """After a rank is killed (kill -9 on a simulated cluster, one rank per host; needs
    root), how long until the job trains again (TTTA), how many resets it cost, the
    launcher's ledger of the way back (reset, ring formed, state restored), how many batches
    it trains again, its effective training time ratio and final accuracy: ringtrain's
    restart, ringtrain --elastic, and horovodrun --elastic on the same hosts in the same
    run, each with the defaults a user gets."""
    from ringtrain.bench.launcher import recovery  # noqa: PLC0415 - starts a cluster

    unknown = set(modes.split(",")) - set(MODES)
    if unknown:
        raise click.BadParameter(f"{', '.join(sorted(unknown))}: choose from {', '.join(MODES)}",
                                 param_hint="--modes")
    sizes = ranks.split(",")
    if not all(n.isdigit() and int(n) >= 3 for n in sizes):
        raise click.BadParameter(f"{ranks}: world sizes of at least 3, such as 3,8",
                                 param_hint="--ranks")
    raise SystemExit(recovery.main([
        "--modes", modes, "--repeats", str(repeats), "--ranks", ranks, "--epochs", str(epochs),
        "--steps-per-epoch", str(steps_per_epoch), "--pause", str(pause),
        "--commit", str(commit), "--kill-at", str(kill_at),
        "--gloo-timeout-seconds", str(gloo_timeout_seconds or 0)]))
