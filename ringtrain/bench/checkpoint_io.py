"""Benchmark: commit (hash + upload + manifest) and verified restore of an N MB checkpoint.

A benchmark, not a test: ``ringtrain ckpt bench`` runs it and prints the table. With no URL it
measures a temporary local directory, a temporary SeaweedFS server and a temporary HDFS
(Hadoop's MiniDFSCluster, one DataNode), all on 127.0.0.1, for each checkpoint size. The payload
is random bytes (incompressible), split into a few files like a real tf.train.Checkpoint.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringtrain.checkpoint.commit_protocol import commit
from ringtrain.checkpoint.resume import find_latest
from ringtrain.checkpoint.store import open_store
from ringtrain.sim.s3server import start_s3_server

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BenchResult:
    url: str
    size_bytes: int
    files: int
    commit_s: tuple[float, ...]
    restore_s: tuple[float, ...]

    @property
    def commit_median_s(self) -> float:
        return statistics.median(self.commit_s)

    @property
    def restore_median_s(self) -> float:
        return statistics.median(self.restore_s)

    @property
    def commit_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.commit_median_s

    @property
    def restore_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.restore_median_s


def make_payload(directory: Path, size_bytes: int, files: int) -> Path:
    """``files`` random files totalling ``size_bytes`` (the last takes the remainder)."""
    directory.mkdir(parents=True, exist_ok=True)
    each = size_bytes // files
    for i in range(files):
        size = each if i < files - 1 else size_bytes - each * (files - 1)
        with open(directory / f"part-{i:03d}.bin", "wb") as f:
            left = size
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
    return directory


def bench_url(
    url: str, payload: Path, *, repeats: int, workdir: Path, options: dict[str, Any] | None = None
) -> BenchResult:
    """Commit ``payload`` ``repeats`` times (steps 1..N, keep 1), restore after each."""
    store = open_store(url, options=options)
    size = sum(p.stat().st_size for p in payload.iterdir())
    commits, restores = [], []
    for step in range(1, repeats + 1):
        started = time.perf_counter()
        commit(store, payload, step=step, epoch=step, keep=1)
        commits.append(time.perf_counter() - started)
        dest = workdir / f"restore-{step}"
        started = time.perf_counter()
        restored = find_latest(store, dest)
        restores.append(time.perf_counter() - started)
        if restored is None or restored.step != step:
            raise AssertionError(f"restore after commit {step} found {restored}")
        log.info("%s: commit %.3f s, restore %.3f s", url, commits[-1], restores[-1])
    return BenchResult(url, size, len(list(payload.iterdir())), tuple(commits), tuple(restores))


@contextmanager
def temporary_targets(base: Path, with_s3: bool, with_hdfs: bool = False
                      ) -> Iterator[tuple[Target, ...]]:
    """A local directory and, if asked, a fresh S3 server and a fresh HDFS (Hadoop's
    MiniDFSCluster, ringtrain.sim.minihdfs); the servers stop afterwards."""
    targets = [Target(str(base / "local-target"), None)]
    server = start_s3_server(base / "s3", bucket="bench") if with_s3 else None
    hdfs = None
    try:
        if server is not None:
            targets.append(Target(server.url("run"), server.client_options()))
        if with_hdfs:
            from ringtrain.sim import minihdfs

            hdfs = minihdfs.start(base / "hdfs")
            targets.append(Target(f"{hdfs.url}/bench", None))
        yield tuple(targets)
    finally:
        if hdfs is not None:
            hdfs.stop()
        if server is not None:
            server.stop()


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    options: dict[str, Any] | None  # S3 credentials held in memory: no environment change


def run_bench(
    urls: tuple[str, ...], *, sizes_mb: tuple[int, ...] = (100,), files: int = 4,
    repeats: int = 3, with_s3: bool = True, with_hdfs: bool = False,
) -> tuple[BenchResult, ...]:
    """Benchmark ``urls`` (or a temporary local dir, S3 server and HDFS when none are given)
    with a checkpoint of each size, smallest first."""
    out = []
    with tempfile.TemporaryDirectory(prefix="ringtrain-ckpt-bench-") as tmp:
        base = Path(tmp)
        given = tuple(Target(u, None) for u in urls)
        with temporary_targets(base, with_s3, with_hdfs) if not urls else _given(
                given) as targets:
            for size_mb in sorted(sizes_mb):
                payload = make_payload(base / f"payload-{size_mb}", size_mb * 1_000_000, files)
                out += [bench_url(f"{t.url}/{size_mb}mb" if not urls else t.url, payload,
                                  repeats=repeats, workdir=base / f"w{size_mb}-{i}",
                                  options=t.options)
                        for i, t in enumerate(targets)]
                shutil.rmtree(payload)
    return tuple(out)


@contextmanager
def _given(targets: tuple[Target, ...]) -> Iterator[tuple[Target, ...]]:
    yield targets


def run_overhead(*, sizes_mb: tuple[int, ...], epochs: int = 4, steps: int = 30,
                 with_s3: bool = True, with_hdfs: bool = True,
                 tf_threads: int | None = None) -> tuple[Any, ...]:
    """``commit_overhead.measure`` on a temporary local directory, S3 server and HDFS."""
    from ringtrain.bench.commit_overhead import limit_threads, measure
    from ringtrain.keras import state
    from ringtrain.keras.uploader import UPLOADER

    if tf_threads:
        limit_threads(tf_threads)
    out = []
    with tempfile.TemporaryDirectory(prefix="ringtrain-commit-overhead-") as tmp, \
            temporary_targets(Path(tmp), with_s3, with_hdfs) as targets:
        for size_mb in sorted(sizes_mb):
            for t in targets:
                def url_of(mode: str, t: Target = t, size_mb: int = size_mb) -> str:
                    url = f"{t.url}/overhead-{size_mb}mb-{mode}"
                    if state._STATE.stores is None:
                        state._STATE.stores = {}
                    state._STATE.stores[url] = open_store(url, options=t.options)
                    return url

                label = ("s3" if t.url.startswith("s3://") else
                         "hdfs" if t.url.startswith("hdfs://") else "local disk")
                out.append(measure(label, url_of, size_mb=size_mb, epochs=epochs, steps=steps,
                                   wait=UPLOADER.wait, snapshots=UPLOADER.snapshots_s))
    return tuple(out)
