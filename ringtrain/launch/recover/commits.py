"""The newest committed checkpoint of a run, as the launcher sees it between attempts (what a
restart resumes, and the crash-loop check's evidence of progress)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ringtrain.checkpoint.location import Location
from ringtrain.errors import RingtrainError
from ringtrain.launch.record.result import ResumePoint

log = logging.getLogger(__name__)


def newest_commit(where: Location) -> ResumePoint | None:
    """The newest checkpoint at ``where`` whose files verify; None when there is none; a
    ResumePoint with ``error`` when the storage cannot be listed (never a false "none")."""
    if where.is_local and not Path(where.manifests).is_dir():
        return None
    from ringtrain.checkpoint import list_checkpoints, open_store  # noqa: PLC0415 - fsspec

    try:
        listed = list_checkpoints(open_store(where.text))
    except RingtrainError as err:
        log.warning("cannot list checkpoints at %s: %s", where, err)
        return ResumePoint(where.text, error=err.message)
    best = next((c for c in listed if c.ok and c.manifest is not None), None)
    if best is None or best.manifest is None:
        return None
    return ResumePoint(where.text, best.step, best.manifest.epoch, best.name)


def check_storage(where: Location | None, note: Callable[[str], None]) -> None:
    """The checkpoint URL given, tried once (one listing) before any rank starts. A URL that
    cannot work (no NameNode for the name, no such bucket, credentials refused, a missing
    package) raises CheckpointError here, named with its fix, instead of failing every rank
    after the launch. Storage that does not answer right now is a warning (``note``): training
    rides out a short outage (--checkpoint-grace)."""
    if where is None or where.is_local:
        return
    from ringtrain.checkpoint import RetryPolicy, open_store  # noqa: PLC0415 - fsspec
    from ringtrain.checkpoint.catalog import manifest_names  # noqa: PLC0415
    from ringtrain.checkpoint.store import StorageError  # noqa: PLC0415

    try:
        # one try, bounded: storage that is down delays the launch by 15 s at most
        manifest_names(open_store(where.text, retry=RetryPolicy(attempts=1), call_timeout_s=15))
    except StorageError as err:
        if not err.transient:
            raise
        note(f"warning: the checkpoint storage does not answer now ({err.message}); launching "
             "anyway: training rides out a short outage (--checkpoint-grace)")


def resumes_from(point: ResumePoint | None) -> str:
    """Where a restart resumes, as the console says it."""
    if point is not None and point.error is not None:
        return f" from the newest checkpoint that verifies (cannot list now: {point.error})"
    if point is not None:
        return f" from step {point.step} (epoch {point.epoch})"
    return " from the start (no committed checkpoint)"
