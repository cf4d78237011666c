"""Read side of the protocol: list manifests, load them, verify their files.

A manifest that cannot be parsed is reported, never trusted; a checkpoint whose files are
missing, of the wrong size or of the wrong sha256 is reported as broken.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ringtrain.checkpoint.location import MANIFEST_DIR
from ringtrain.checkpoint.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    from_json,
    step_of_manifest,
)
from ringtrain.checkpoint.store import Store
from ringtrain.errors import CheckpointError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Listed:
    """One manifest found on storage, newest first in listings."""

    name: str
    step: int
    manifest: Manifest | None  # None when it could not be parsed
    problems: tuple[str, ...]  # empty: looks complete (or verified, after verify())

    @property
    def ok(self) -> bool:
        return self.manifest is not None and not self.problems


def manifest_rel(name: str) -> str:
    return f"{MANIFEST_DIR}/{name}"


def manifest_names(store: Store) -> tuple[tuple[int, str], ...]:
    """(step, file name) of every manifest, newest (highest step) first."""
    found = []
    for entry in store.list_dir(MANIFEST_DIR):
        step = step_of_manifest(entry.name)
        if step is not None and not entry.is_dir:
            found.append((step, entry.name))
    return tuple(sorted(found, reverse=True))


def load_manifest(store: Store, name: str) -> Manifest:
    """Read and validate one manifest (CheckpointError if invalid or unreadable). At most
    ``MAX_MANIFEST_BYTES + 1`` bytes are read: a bigger one is refused unread."""
    return from_json(store.read_bytes(manifest_rel(name), limit=MAX_MANIFEST_BYTES), name)


def check_sizes(store: Store, manifest: Manifest) -> tuple[str, ...]:
    """Cheap check with one listing: every file present with its size, and, on local storage,
    none reached through a symbolic link (a link planted in a shared checkpoint directory
    would make resume read, or verify hash, a file of someone else's choosing)."""
    present = store.find_files(manifest.data)
    problems = list(_linked(store, manifest))
    for f in manifest.files:
        size = present.get(f.path)
        if size is None:
            problems.append(f"{f.path}: missing")
        elif size != f.size:
            problems.append(f"{f.path}: {size} bytes, manifest says {f.size}")
    return tuple(problems)


def _linked(store: Store, manifest: Manifest) -> tuple[str, ...]:
    if store.location.protocol != "file":
        return ()
    root = os.path.realpath(store.abspath(""))
    out = []
    for f in manifest.files:
        rel = f"{manifest.data}/{f.path}"
        path = store.abspath(rel)
        if os.path.lexists(path) and os.path.realpath(path) != os.path.join(root, rel):
            out.append(f"{f.path}: reached through a symbolic link; refused")
    return tuple(out)


def verify_files(
    store: Store, manifest: Manifest, copy_to: Path | None = None
) -> tuple[str, ...]:
    """Full check: size and sha256 of every file, streamed. Optionally keep a local copy."""
    problems = list(check_sizes(store, manifest))
    if problems:
        return tuple(problems)
    for f in manifest.files:
        target = None
        if copy_to is not None:
            target = copy_to / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
        size, sha = store.hash_file(f"{manifest.data}/{f.path}", target)
        if size != f.size:
            problems.append(f"{f.path}: read {size} bytes, manifest says {f.size}")
        elif sha != f.sha256:
            problems.append(f"{f.path}: sha256 {sha[:12]}..., manifest says {f.sha256[:12]}...")
    return tuple(problems)


def list_checkpoints(store: Store, *, deep: bool = False) -> tuple[Listed, ...]:
    """Every manifest with its state, newest first. ``deep`` reads and hashes every file."""
    out = []
    for step, name in manifest_names(store):
        try:
            manifest = load_manifest(store, name)
        except CheckpointError as err:
            out.append(Listed(name, step, None, (err.message,)))
            continue
        problems = verify_files(store, manifest) if deep else check_sizes(store, manifest)
        out.append(Listed(name, step, manifest, problems))
    return tuple(out)
