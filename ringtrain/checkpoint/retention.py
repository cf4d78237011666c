"""Retention (keep=N, 3 by default) and garbage collection of attempt directories nobody references.

Order matters for crash safety: a manifest is deleted before its data, so a crash in between
leaves unreferenced data (collected later), never a manifest pointing at missing files.
Unreferenced data is deleted only when older than ``safe_age_s``: a younger directory may belong
to a commit still uploading in another process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from ringtrain.checkpoint.catalog import load_manifest, manifest_names, manifest_rel
from ringtrain.checkpoint.location import DATA_DIR
from ringtrain.checkpoint.manifest import attempt_created
from ringtrain.checkpoint.store import Store
from ringtrain.errors import CheckpointError

log = logging.getLogger(__name__)

DEFAULT_SAFE_AGE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Cleanup:
    removed_steps: tuple[int, ...] = ()
    removed_attempts: tuple[str, ...] = ()


def apply_retention(store: Store, keep: int) -> tuple[int, ...]:
    """Keep the ``keep`` newest manifests; delete older ones (manifest first, then its data)."""
    if keep < 1:
        raise CheckpointError(f"keep={keep}: must keep at least one checkpoint",
                              "pass keep=1 or more to ringtrain.keras.callbacks() or save() "
                              "(the digits model: --keep)")
    removed = []
    for step, name in manifest_names(store)[keep:]:
        data = None
        try:
            data = load_manifest(store, name).data
        except CheckpointError as err:
            log.warning("removing unreadable manifest %s (%s)", name, err.message)
        store.remove(manifest_rel(name))
        if data is not None:
            store.remove_tree(data)
        removed.append(step)
        log.info("retention: removed checkpoint step %d", step)
    return tuple(removed)


def collect_garbage(
    store: Store, *, safe_age_s: float = DEFAULT_SAFE_AGE_S, now: datetime | None = None
) -> tuple[str, ...]:
    """Delete attempt directories that no manifest references and that are old enough."""
    referenced: set[str] = set()
    unreadable_steps: set[int] = set()
    for step, name in manifest_names(store):
        try:
            referenced.add(load_manifest(store, name).data)
        except CheckpointError as err:
            if getattr(err, "transient", False):
                raise
            unreadable_steps.add(step)  # cannot tell which attempt it names: keep them all
    now = now or datetime.now(timezone.utc)
    removed = []
    for entry in store.list_dir(DATA_DIR):
        created = attempt_created(entry.name)
        rel = f"{DATA_DIR}/{entry.name}"
        if created is None or rel in referenced or int(entry.name[:12]) in unreadable_steps:
            continue
        if (now - created).total_seconds() < safe_age_s:
            continue
        store.remove_tree(rel)
        removed.append(entry.name)
        log.info("garbage collection: removed unreferenced %s", rel)
    return tuple(removed)


def clean(store: Store, keep: int | None, *, safe_age_s: float = DEFAULT_SAFE_AGE_S) -> Cleanup:
    """Retention then garbage collection, as run after every commit."""
    steps = apply_retention(store, keep) if keep is not None else ()
    return Cleanup(steps, collect_garbage(store, safe_age_s=safe_age_s))
