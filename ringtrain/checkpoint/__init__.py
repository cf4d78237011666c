"""Atomic checkpoint commit and verified resume over fsspec (file://, s3://, hdfs://).

Protocol (see manifest.py for the layout): files go under a unique attempt directory, then a
manifest listing their sizes and sha256 is created exclusively, last; resume takes the newest
manifest whose files verify; retention deletes manifests before data; unreferenced data is
collected only after a safe age. Nothing here imports TensorFlow.

    store = open_store("s3://bucket/run1")
    commit(store, Path("local_ckpt_dir"), step=420, epoch=3, keep=3)
    restored = find_latest(store, Path("/tmp/restore"))   # Restored | None
"""

import importlib
from typing import TYPE_CHECKING, Any

from ringtrain.checkpoint.location import Location

if TYPE_CHECKING:  # the rest loads on first use: fsspec costs ~50 ms to import, and a launch
    # needs only Location (spec.py) until it lists checkpoints
    from ringtrain.checkpoint.catalog import Listed, list_checkpoints, load_manifest, verify_files
    from ringtrain.checkpoint.commit_protocol import CommitConflict, Committed, commit
    from ringtrain.checkpoint.manifest import FileEntry, Manifest
    from ringtrain.checkpoint.resume import Restored, find_latest
    from ringtrain.checkpoint.retention import (
        DEFAULT_SAFE_AGE_S,
        Cleanup,
        apply_retention,
        collect_garbage,
    )
    from ringtrain.checkpoint.retry import RetryPolicy
    from ringtrain.checkpoint.store import Hook, StorageError, Store, open_store

__all__ = [
    "DEFAULT_SAFE_AGE_S",
    "Cleanup",
    "CommitConflict",
    "Committed",
    "FileEntry",
    "Hook",
    "Listed",
    "Location",
    "Manifest",
    "Restored",
    "RetryPolicy",
    "StorageError",
    "Store",
    "apply_retention",
    "collect_garbage",
    "commit",
    "find_latest",
    "list_checkpoints",
    "load_manifest",
    "open_store",
    "verify_files",
]

_HOMES = {
    "Listed": "catalog", "list_checkpoints": "catalog", "load_manifest": "catalog",
    "verify_files": "catalog", "CommitConflict": "commit_protocol",
    "Committed": "commit_protocol", "commit": "commit_protocol", "FileEntry": "manifest",
    "Manifest": "manifest", "Restored": "resume", "find_latest": "resume",
    "DEFAULT_SAFE_AGE_S": "retention", "Cleanup": "retention", "apply_retention": "retention",
    "collect_garbage": "retention", "RetryPolicy": "retry", "Hook": "store",
    "StorageError": "store", "Store": "store", "open_store": "store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ringtrain.checkpoint' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ringtrain.checkpoint.{home}"), name)
