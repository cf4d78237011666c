"""Find and fetch the newest checkpoint whose files verify.

Manifests are tried newest first. Each one's files are downloaded into a fresh directory while
their sha256 is computed; the first checkpoint that verifies completely is returned. Broken or
unreadable ones are logged and skipped: resume falls back to the previous checkpoint.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from ringtrain.checkpoint.catalog import load_manifest, manifest_names, verify_files
from ringtrain.checkpoint.manifest import Manifest
from ringtrain.checkpoint.store import StorageError, Store
from ringtrain.errors import CheckpointError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Restored:
    manifest: Manifest
    directory: Path  # local copy of the checkpoint's files
    skipped: tuple[str, ...]  # newer manifests that did not verify, with why

    @property
    def step(self) -> int:
        return self.manifest.step

    @property
    def epoch(self) -> int:
        return self.manifest.epoch


def _try_one(store: Store, name: str, dest: Path) -> tuple[Manifest | None, Path, str]:
    """(manifest, directory, "") when it verifies, else (None, directory, why)."""
    workdir = dest / f".fetch-{secrets.token_hex(4)}"
    workdir.mkdir(parents=True)
    try:
        manifest = load_manifest(store, name)
        problems = verify_files(store, manifest, copy_to=workdir)
    except StorageError as err:
        shutil.rmtree(workdir, ignore_errors=True)
        if err.transient:
            raise  # storage unreachable: do not silently fall back to an older checkpoint
        return None, workdir, err.message
    except CheckpointError as err:
        shutil.rmtree(workdir, ignore_errors=True)
        return None, workdir, err.message
    if problems:
        shutil.rmtree(workdir, ignore_errors=True)
        return None, workdir, "; ".join(problems[:3])
    return manifest, workdir, ""


def find_latest(store: Store, dest: Path) -> Restored | None:
    """Download the newest verified checkpoint into ``dest/ckpt-<step>``; None if there is none.

    Raises StorageError when the storage cannot be read at all (credentials, outage): starting
    from scratch over an existing checkpoint would be wrong.
    """
    skipped: list[str] = []
    for step, name in manifest_names(store):
        manifest, workdir, why = _try_one(store, name, dest)
        if manifest is None:
            log.warning("checkpoint step %d at %s does not verify (%s); trying older", step,
                        store.url, why)
            skipped.append(f"{name}: {why}")
            continue
        final = dest / f"ckpt-{step:012d}"
        if final.exists():
            shutil.rmtree(final)
        workdir.rename(final)
        log.info("resuming from checkpoint step %d (epoch %d) at %s", step, manifest.epoch,
                 store.url)
        return Restored(manifest, final, tuple(skipped))
    if skipped:
        log.warning("no checkpoint at %s verifies; starting from scratch", store.url)
    return None
