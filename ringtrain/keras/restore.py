"""``ringtrain.keras.resume``: on every rank, restore the newest verified checkpoint.

Rank 0 checks that the storage takes writes, fetches the newest checkpoint whose files verify
and broadcasts the resume point; rank 0 restores it, then every model and optimizer variable is
broadcast from rank 0, so all ranks continue with identical state. Only rank 0 touches the
storage."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import tensorflow as tf

from ringtrain.checkpoint import Store, find_latest
from ringtrain.checkpoint.store import StorageError
from ringtrain.errors import CheckpointError, UsageError
from ringtrain.keras import memory, state
from ringtrain.keras import world as keras_world
from ringtrain.keras.state import (
    CKPT_PREFIX,
    ResumePoint,
    _optimizer,
    _tell_launcher,
    _tf_checkpoint,
    checkpoint_url,
)


def resume(model: Any, optimizer: Any = None, *, url: str | None = None) -> int:
    """On every rank: restore the newest verified checkpoint, or start every rank from rank
    0's initial weights. Returns the epoch to start at (``initial_epoch``; 0 when new).

    Call it after ``model.compile`` (or, in a custom loop, once the model is built) and after
    ``hvd.init()``. ``optimizer`` defaults to ``model.optimizer``."""
    world = keras_world.world(model)
    optimizer = _optimizer(model, optimizer)
    where = checkpoint_url(url)
    _tell_launcher(resume=True, checkpoint=where)
    if world.kind == keras_world.HOROVOD and memory.enabled():
        _check_built(model)
        epoch = memory.restore(model, optimizer)  # a reset, or a process joining a job
        if epoch is not None:
            return epoch
    point = _restore(model, optimizer, where, world)
    if point is not None and world.rank() == 0:
        print(f"ringtrain: resumed from epoch {point.epoch} step {point.step} ({where})",
              flush=True)
    state._STATE.resumed = point
    return point.epoch if point else 0


def resumed() -> ResumePoint | None:
    """What the last ``resume`` restored (None: a new run)."""
    return state._STATE.resumed


def _state_variables(model: Any, optimizer: Any) -> list[Any]:
    variables = list(model.variables) + list(optimizer.variables)
    lr = getattr(optimizer, "learning_rate", None)
    if isinstance(lr, tf.Variable):
        variables.append(lr)
    return variables


def _fetch_on_rank0(url: str, staging: Path, model: Any) -> dict[str, Any]:
    """What rank 0 broadcasts: the resume point, nothing, or an error to raise everywhere."""
    try:
        store = state._STATE.store(url)
        _check_writable(store)
        restored = find_latest(store, staging)
    except CheckpointError as err:
        return {"error": err.message, "hint": err.hint}
    if restored is None:
        return {}
    differs = state.mismatch(restored.manifest.meta.get("variables"),
                             state.variable_shapes(model))
    if differs:
        return {"error": f"checkpoint {restored.manifest.name} at {url} belongs to another "
                         f"model: {'; '.join(differs)}",
                "hint": "pass a new --checkpoint URL for this model (this one keeps the other "
                        "model's checkpoints), or fix the model to match"}
    point = {"step": restored.step, "epoch": restored.epoch,
             "manifest": restored.manifest.name, "skipped": list(restored.skipped)}
    return {"point": point, "dir": str(restored.directory)}


def _check_writable(store: Store) -> None:
    """Before the first epoch, not after it: write and remove a small object. Its name is
    unpredictable, and a local one is created new (0600, no symlink followed): in a shared
    directory, a link planted by another user cannot redirect the write to a file of ours."""
    rel = f".ringtrain-write-check-{secrets.token_hex(16)}"
    data = b"ringtrain checks that checkpoints can be written here\n"
    try:
        if store.location.protocol == "file":
            _create_local(store, rel, data)
        else:
            store.put_bytes(rel, data)
        store.remove(rel)
    except CheckpointError as err:
        raise CheckpointError(
            f"cannot write checkpoints to {store.url}: {err.message}",
            "check the URL, its permissions and credentials (AWS_* variables for s3://), or "
            "pass another --checkpoint",
        ) from None


def _create_local(store: Store, rel: str, data: bytes) -> None:
    """Create ``rel`` under a local store: a new file only (O_EXCL), never through a symlink
    (O_NOFOLLOW), its owner's only (0600); the directory is made as a put would."""
    path = store.abspath(rel)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as err:
        raise StorageError("put", store.url_of(rel), err) from err


def _check_built(model: Any) -> None:
    if not model.built:
        raise UsageError(
            "ringtrain.keras.resume: the model is not built yet, so its weights cannot be "
            "restored",
            "give the model an Input layer, or call model.build(input_shape) first",
        )


def _restore(model: Any, optimizer: Any, url: str, world: Any) -> ResumePoint | None:
    _check_built(model)
    optimizer.build(model.trainable_variables)  # create the slots so they restore at once
    fetch = state._STATE.staging_dir() / "resume"
    answer = _fetch_on_rank0(url, fetch, model) if world.rank() == 0 else None
    answer = world.broadcast_object(answer, root_rank=0, name="ringtrain.resume")
    if "error" in answer:
        raise CheckpointError(answer["error"], answer["hint"])
    point = None
    if "point" in answer:
        raw = answer["point"]
        point = ResumePoint(raw["step"], raw["epoch"], raw["manifest"], tuple(raw["skipped"]))
        if world.rank() == 0:
            ckpt = _tf_checkpoint(model, optimizer)
            ckpt.read(str(Path(answer["dir"]) / CKPT_PREFIX)).assert_existing_objects_matched()
            if int(optimizer.iterations.numpy()) != point.step:
                raise CheckpointError(
                    f"checkpoint {point.manifest} holds step "
                    f"{int(optimizer.iterations.numpy())}, its manifest says {point.step}",
                    "the checkpoint was not written by this training script; use another URL",
                )
    shutil.rmtree(fetch, ignore_errors=True)  # every variable exists: nothing is deferred
    world.broadcast_variables(_state_variables(model, optimizer), root_rank=0)
    return point

