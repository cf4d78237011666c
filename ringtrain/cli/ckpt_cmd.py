"""``ringtrain ckpt``: list and verify the checkpoints at a URL; benchmark commits.

Credentials come from the standard AWS variables and files (``AWS_ENDPOINT_URL_S3``,
``AWS_ACCESS_KEY_ID``..., ``AWS_CONFIG_FILE``), never from the command line.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ringtrain.checkpoint import Listed, list_checkpoints, open_store
from ringtrain.cli.plain import cell
from ringtrain.errors import CheckpointError

_EPILOG = """\b
Examples:
  ringtrain ckpt ls s3://ringtrain/digits
  ringtrain ckpt ls runs/20261121-201015-cb6f/checkpoints --json
  ringtrain ckpt verify s3://ringtrain/digits      sha256 of every file of every checkpoint
  ringtrain ckpt bench                             100 MB to local disk, S3 and HDFS servers
  ringtrain ckpt bench --size-mb 10,100,1000       each size, smallest first
"""


@click.group("ckpt", epilog=_EPILOG)
def command() -> None:
    """Inspect checkpoints committed by rank 0 (local path, file://, s3://, hdfs://)."""


def _row(item: Listed) -> dict[str, Any]:
    m = item.manifest
    return {
        "name": item.name,
        "step": item.step,
        "epoch": m.epoch if m else None,
        "files": len(m.files) if m else None,
        "bytes": m.total_bytes if m else None,
        "created": m.created if m else None,
        "ok": item.ok,
        "problems": list(item.problems),
    }


def _table(items: tuple[Listed, ...], title: str) -> Table:
    table = Table(title=cell(title), title_justify="left")
    for col in ("step", "epoch", "files", "size"):
        table.add_column(col, justify="right")
    table.add_column("created")
    table.add_column("state")
    for item in items:
        m = item.manifest
        state = "ok" if item.ok else "BROKEN: " + "; ".join(item.problems[:2])
        # a manifest's text comes from the storage: shown as text, never as rich markup, and
        # without terminal escape sequences
        table.add_row(
            str(item.step),
            str(m.epoch) if m else "?",
            str(len(m.files)) if m else "?",
            f"{m.total_bytes / 1e6:.2f} MB" if m else "?",
            cell(m.created) if m else "?",
            cell(state),
        )
    return table


def _resume_line(items: tuple[Listed, ...]) -> str:
    good = next((i for i in items if i.ok), None)
    if good is None:
        return "resume: no usable checkpoint (a run would start from scratch)"
    return f"resume: step {good.step} (epoch {good.manifest.epoch if good.manifest else '?'})"


def _show(url: str, deep: bool, as_json: bool) -> tuple[Listed, ...]:
    store = open_store(url)
    items = list_checkpoints(store, deep=deep)
    if as_json:
        click.echo(json.dumps({"url": store.url, "checkpoints": [_row(i) for i in items]},
                              indent=1))
    elif not items:
        click.echo(f"no checkpoints at {store.url}")
    else:
        check = "sha256 verified" if deep else "sizes checked; `ckpt verify` reads every byte"
        Console(width=140).print(_table(items, f"{store.url} ({check})"))
        click.echo(_resume_line(items))
    return items


@command.command("ls")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ls_cmd(url: str, as_json: bool) -> None:
    """List checkpoints at URL, newest first, with a cheap completeness check (sizes)."""
    _show(url, deep=False, as_json=as_json)


@command.command("verify")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify_cmd(url: str, as_json: bool) -> None:
    """Read every file of every checkpoint at URL and check its size and sha256.

    Exits 0 when all verify, 6 when any does not (resume would skip those).
    """
    items = _show(url, deep=True, as_json=as_json)
    bad = [i for i in items if not i.ok]
    if not items:
        raise CheckpointError(f"no checkpoints at {url}", "check the URL; nothing was committed")
    if bad:
        raise CheckpointError(
            f"{len(bad)} of {len(items)} checkpoints at {url} do not verify "
            f"(newest broken: step {bad[0].step})",
            "resume skips broken checkpoints; delete them or restore the objects from a backup",
        )


@command.command("bench")
@click.argument("urls", nargs=-1)
@click.option("--size-mb", "sizes", default="100", show_default=True, metavar="MB[,MB...]",
              help="Checkpoint sizes, e.g. 10,100,1000.")
@click.option("--files", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--no-s3", is_flag=True, help="Without URLs: skip the temporary S3 server.")
@click.option("--no-hdfs", is_flag=True,
              help="Without URLs: skip the temporary HDFS (its first start builds Hadoop's "
              "minicluster with Maven).")
@click.option("--train", is_flag=True,
              help="Instead: what a commit per epoch costs a training loop (a model of each "
              "size), with no checkpoint, synchronous and in the background, side by side.")
@click.option("--epochs", type=click.IntRange(min=2), default=4, show_default=True,
              help="With --train: epochs per run (the first is not counted).")
@click.option("--steps", type=click.IntRange(min=1), default=30, show_default=True,
              help="With --train: steps per epoch.")
@click.option("--tf-threads", type=click.IntRange(min=1),
              help="With --train: TensorFlow's compute on N threads, the rest of the machine "
              "left to the upload (as a GPU job leaves its host's cores).")
def bench_cmd(urls: tuple[str, ...], sizes: str, files: int, repeats: int, no_s3: bool,
              no_hdfs: bool, train: bool, epochs: int, steps: int,
              tf_threads: int | None) -> None:
    """Time commit and verified restore of checkpoints of each size to each URL.

    Without URLs: a temporary local directory, a temporary SeaweedFS S3 server and a temporary
    HDFS (Hadoop's MiniDFSCluster), all on 127.0.0.1.
    """
    from ringtrain.bench.checkpoint_io import (  # noqa: PLC0415 - starts servers
        run_bench,
        run_overhead,
    )

    try:
        sizes_mb = tuple(int(s) for s in sizes.split(",") if s.strip())
    except ValueError:
        raise click.BadParameter(f"{sizes!r} is not a list of sizes in MB like 10,100,1000",
                                 param_hint="--size-mb") from None
    if not sizes_mb or min(sizes_mb) < 1:
        raise click.BadParameter("sizes are whole MB, at least 1", param_hint="--size-mb")
    if train:
        if urls:
            raise click.UsageError("--train measures temporary targets: give no URLs")
        _overhead_table(run_overhead(sizes_mb=sizes_mb, epochs=epochs, steps=steps,
                                     with_s3=not no_s3, with_hdfs=not no_hdfs,
                                     tf_threads=tf_threads), epochs, steps)
        return
    results = run_bench(urls, sizes_mb=sizes_mb, files=files, repeats=repeats,
                        with_s3=not no_s3, with_hdfs=not no_hdfs)
    table = Table(title=f"checkpoint commit/restore in {files} files, median of {repeats}",
                  title_justify="left")
    for col in ("target", "MB", "commit s", "commit MB/s", "restore s", "restore MB/s"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for r in results:
        target = ("s3 (SeaweedFS, 127.0.0.1)" if r.url.startswith("s3://") else
                  "hdfs (MiniDFSCluster, 127.0.0.1)" if r.url.startswith("hdfs://") else
                  "local disk")
        table.add_row(
            f"{target}: {r.url}" if urls else target,
            f"{r.size_bytes / 1e6:.0f}",
            f"{r.commit_median_s:.3f}",
            f"{r.commit_mb_s:.0f}",
            f"{r.restore_median_s:.3f}",
            f"{r.restore_mb_s:.0f}",
        )
    Console(width=140).print(table)


def _overhead_table(rows: tuple[Any, ...], epochs: int, steps: int) -> None:
    table = Table(title=f"a checkpoint commit per epoch: what it adds to an epoch of {steps} "
                  f"steps (median of {epochs - 1} epochs)", title_justify="left")
    for col in ("target", "MB", "step ms", "epoch s", "sync +s", "sync %", "async +s",
                "async %", "of it, snapshot s"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for r in rows:
        table.add_row(r.target, str(r.size_mb), f"{r.step_s * 1e3:.1f}",
                      f"{r.epoch_s['none']:.2f}", f"{r.extra_s('sync'):.2f}",
                      f"{r.share('sync') * 100:.1f}", f"{r.extra_s('async'):.2f}",
                      f"{r.share('async') * 100:.1f}", f"{r.snapshot_s:.2f}")
    Console(width=140).print(table)
