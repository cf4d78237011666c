"""Write side of the protocol: commit a local directory as checkpoint ``step``.

1. hash every local file (size, sha256);
2. upload them under a fresh attempt directory ``data/<step>-<utc>-<token>/`` (invisible);
3. list the attempt directory: every file present with its size, else abandon the attempt;
4. create ``manifests/ckpt-<step>.json`` exclusively: the commit point. If it already exists,
   another writer won (or our own earlier try of this very request did: we read it back);
5. retention (--keep) and garbage collection, whose failures only log a warning.

A failure before step 4 removes the attempt directory (best effort) and raises: no manifest,
so no checkpoint is visible. A failure *during* step 4 may or may not have created the manifest;
the data then stays, and resume or garbage collection sorts it out.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringtrain.checkpoint.catalog import load_manifest, manifest_rel, verify_files
from ringtrain.checkpoint.location import DATA_DIR
from ringtrain.checkpoint.manifest import (
    FileEntry,
    Manifest,
    check_relpath,
    new_attempt,
    to_json,
    utc_now_iso,
)
from ringtrain.checkpoint.retention import DEFAULT_SAFE_AGE_S, Cleanup, clean
from ringtrain.checkpoint.retry import RetryPolicy
from ringtrain.checkpoint.store import StorageError, Store
from ringtrain.errors import CheckpointError

log = logging.getLogger(__name__)
HDFS_PARALLEL_PUTS = 8


class CommitConflict(CheckpointError):
    """Another writer committed the same step first."""


@dataclass(frozen=True, slots=True)
class Committed:
    manifest: Manifest
    url: str  # of the manifest
    seconds: float
    cleanup: Cleanup

    @property
    def mb_per_s(self) -> float:
        return self.manifest.total_bytes / 1e6 / max(self.seconds, 1e-9)


def scan_local(src: Path) -> tuple[tuple[FileEntry, Path], ...]:
    """Every regular file under ``src`` with its size and sha256, sorted by path."""
    if not src.is_dir():
        raise CheckpointError(f"{src} is not a directory", "save the checkpoint files there first")
    out = []
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = check_relpath(path.relative_to(src).as_posix())
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        out.append((FileEntry(rel, size, digest.hexdigest()), path))
    if not out:
        raise CheckpointError(f"{src} holds no files", "save the checkpoint files there first")
    return tuple(out)


def _upload(store: Store, data: str, files: tuple[tuple[FileEntry, Path], ...]) -> None:
    puts = [(f"{data}/{entry.path}", path) for entry, path in files]
    if store.is_hdfs and len(puts) > 1:
        # hdfs-native waits a fixed 500 ms once the NameNode answers a file's first complete()
        # with "not yet" (its DataNode has not reported the block), which it does for nearly
        # every file (rust/src/file.rs, COMPLETE_RETRY_DELAY_MS): in parallel, a commit pays it
        # about once for its data instead of once per file
        with ThreadPoolExecutor(min(len(puts), HDFS_PARALLEL_PUTS),
                                thread_name_prefix="hdfs-put") as pool:
            for _ in pool.map(lambda put: store.put_file(*put), puts):
                pass
    else:
        for rel, path in puts:
            store.put_file(rel, path)
    present = store.find_files(data)
    wrong = [e.path for e, _ in files if present.get(e.path) != e.size]
    if wrong:
        raise CheckpointError(
            f"upload to {store.url_of(data)} incomplete: {', '.join(wrong[:5])} missing or short",
            "the storage lost or truncated writes; check its health and run again",
        )


def _abandon(store: Store, data: str) -> None:
    """Best effort, one try: after an outage, garbage collection removes what is left."""
    try:
        replace(store, retry=RetryPolicy(attempts=1)).remove_tree(data)
    except CheckpointError as err:
        log.warning("could not remove abandoned %s (%s); GC will", store.url_of(data), err)


def _settle_conflict(store: Store, ours: Manifest) -> None:
    """The manifest existed already. Ours (a retried create that had succeeded), theirs, or a
    corrupt one that resume skipped (training reached its step again): replace only that."""
    rel = manifest_rel(ours.name)
    try:
        theirs = load_manifest(store, ours.name)
    except StorageError as err:
        raise CommitConflict(
            f"checkpoint step {ours.step} exists at {store.url_of(rel)} and cannot be read "
            f"({err.message})",
            "another job writes to the same checkpoint URL: give each run its own URL",
        ) from None
    except CheckpointError as err:  # not a valid manifest: a corrupt checkpoint
        broken = err.message
    else:
        if theirs.data == ours.data:
            return
        problems = verify_files(store, theirs)
        if not problems:
            _abandon(store, ours.data)
            raise CommitConflict(
                f"checkpoint step {ours.step} was committed by another writer first",
                "another job writes to the same checkpoint URL: give each run its own URL",
            )
        broken = "; ".join(problems[:3])
    log.warning("replacing the corrupt checkpoint %s (%s)", store.url_of(rel), broken)
    store.remove(rel)
    if not store.create_exclusive(rel, to_json(ours)):
        _abandon(store, ours.data)
        raise CommitConflict(
            f"checkpoint step {ours.step} was committed by another writer while ringtrain "
            "replaced a corrupt one",
            "another job writes to the same checkpoint URL: give each run its own URL",
        )


def commit(
    store: Store,
    src: Path,
    *,
    step: int,
    epoch: int,
    meta: Mapping[str, Any] | None = None,
    keep: int | None = None,
    safe_age_s: float = DEFAULT_SAFE_AGE_S,
) -> Committed:
    """Commit the files under ``src`` as checkpoint ``step``. See the module docstring."""
    started = time.monotonic()
    files = scan_local(src)
    data = f"{DATA_DIR}/{new_attempt(step)}"
    manifest = Manifest(
        step, epoch, data, tuple(e for e, _ in files), utc_now_iso(), dict(meta or {})
    )
    try:
        _upload(store, data, files)
    except CheckpointError:
        _abandon(store, data)
        raise
    if not store.create_exclusive(manifest_rel(manifest.name), to_json(manifest)):
        _settle_conflict(store, manifest)
    seconds = time.monotonic() - started
    log.info(
        "committed step %d (%d files, %.1f MB) to %s in %.2f s",
        step,
        len(files),
        manifest.total_bytes / 1e6,
        store.url,
        seconds,
    )
    try:
        cleanup = clean(store, keep, safe_age_s=safe_age_s)
    except CheckpointError as err:
        log.warning("checkpoint committed, but cleanup failed: %s", err.message)
        cleanup = Cleanup()
    return Committed(manifest, store.url_of(manifest_rel(manifest.name)), seconds, cleanup)
