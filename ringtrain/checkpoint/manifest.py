"""The checkpoint manifest and the names on storage. Pure: no I/O.

Layout under a checkpoint URL::

    manifests/ckpt-000000000420.json            one per committed checkpoint, written last
    data/000000000420-20261121T201500Z-1a2b3c4d/  the files of one commit attempt

A checkpoint exists only when its manifest exists and every file it lists has the listed size
and sha256. Attempt directories without a manifest are leftovers of failed or racing commits.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ringtrain.checkpoint.location import DATA_DIR
from ringtrain.errors import CheckpointError

FORMAT = "ringtrain.checkpoint/1"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists files; 16 MiB is far beyond any real one

_MANIFEST_RE = re.compile(r"^ckpt-(\d{12})\.json\Z")
_ATTEMPT_RE = re.compile(r"^(\d{12})-(\d{8}T\d{6}Z)-([0-9a-f]{8})\Z")
_SHA_RE = re.compile(r"^[0-9a-f]{64}\Z")
_STAMP = "%Y%m%dT%H%M%SZ"
MAX_STEP = 10**12 - 1


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # relative, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Manifest:
    step: int
    epoch: int
    data: str  # attempt directory relative to the checkpoint URL, e.g. data/0000...-...-...
    files: tuple[FileEntry, ...]
    created: str  # ISO 8601 UTC
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return manifest_name(self.step)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def manifest_name(step: int) -> str:
    if not 0 <= step <= MAX_STEP:
        raise CheckpointError(f"step {step} out of range", "use a step between 0 and 10**12-1")
    return f"ckpt-{step:012d}.json"


def step_of_manifest(name: str) -> int | None:
    """The step a manifest file name stands for, or None for anything else (temp files...)."""
    m = _MANIFEST_RE.match(name)
    return int(m.group(1)) if m else None


def new_attempt(step: int, now: datetime | None = None) -> str:
    """A fresh attempt directory name: step, UTC creation time, random token."""
    manifest_name(step)  # range check
    stamp = (now or datetime.now(timezone.utc)).strftime(_STAMP)
    return f"{step:012d}-{stamp}-{secrets.token_hex(4)}"


def attempt_created(name: str) -> datetime | None:
    """When an attempt directory was created (from its name), None if not an attempt name."""
    m = _ATTEMPT_RE.match(name)
    if not m:
        return None
    return datetime.strptime(m.group(2), _STAMP).replace(tzinfo=timezone.utc)


def check_relpath(path: str) -> str:
    """Reject paths that could escape the attempt directory."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 32 for c in path)
    ):
        raise CheckpointError(
            f"unsafe file name in checkpoint: {path!r}",
            "checkpoint files must be plain relative paths without '..'",
        )
    return path


def to_json(manifest: Manifest) -> bytes:
    body = {
        "format": FORMAT,
        "step": manifest.step,
        "epoch": manifest.epoch,
        "data": manifest.data,
        "created": manifest.created,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in manifest.files],
        "meta": dict(manifest.meta),
    }
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def _bad(name: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"manifest {name} is invalid: {why}",
        "it was not written by a compatible ringtrain; remove it or point --checkpoint elsewhere",
    )


def _int(body: Mapping[str, Any], key: str, name: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(name, f"{key!r} must be a non-negative integer")
    return value


def _files(raw: Any, name: str) -> tuple[FileEntry, ...]:
    if not isinstance(raw, list) or not raw:
        raise _bad(name, "'files' must be a non-empty list")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise _bad(name, "each file must be an object")
        path, sha = item.get("path"), item.get("sha256")
        if not isinstance(path, str) or not isinstance(sha, str) or not _SHA_RE.match(sha):
            raise _bad(name, "each file needs 'path' and a hex 'sha256'")
        out.append(FileEntry(check_relpath(path), _int(item, "size", name), sha))
    if len({f.path for f in out}) != len(out):
        raise _bad(name, "duplicate file paths")
    return tuple(out)


def from_json(data: bytes, name: str) -> Manifest:
    """Parse and validate a manifest; ``name`` is its file name (checked against the step)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise _bad(name, f"over {MAX_MANIFEST_BYTES} bytes, more than a manifest ever holds")
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _bad(name, f"not JSON ({err})") from None
    except RecursionError:  # '[[[[...' nested deeper than the parser's stack
        raise _bad(name, "nested too deeply to be a manifest") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise _bad(name, f"format is not {FORMAT!r}")
    step, epoch = _int(body, "step", name), _int(body, "epoch", name)
    if step_of_manifest(name) != step:
        raise _bad(name, f"its name does not match its step {step}")
    data_dir = body.get("data")
    prefix = f"{DATA_DIR}/{step:012d}-"
    if not isinstance(data_dir, str) or not data_dir.startswith(prefix):
        raise _bad(name, f"'data' must name an attempt directory under {DATA_DIR}/")
    if not _ATTEMPT_RE.match(data_dir[len(DATA_DIR) + 1 :]):
        raise _bad(name, f"'data' is not an attempt directory name: {data_dir!r}")
    meta = body.get("meta", {})
    created = body.get("created", "")
    if not isinstance(meta, dict) or not isinstance(created, str):
        raise _bad(name, "'meta' must be an object and 'created' a string")
    return Manifest(step, epoch, data_dir, _files(body.get("files"), name), created, meta)


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
