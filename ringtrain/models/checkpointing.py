"""Checkpoint and resume tf.keras training under Horovod, through ringtrain.checkpoint.

* Format: ``tf.train.Checkpoint(model=..., optimizer=..., epoch=...)`` written with ``write()``
  (files ``ckpt.index`` and ``ckpt.data-00000-of-00001``). The ``.keras`` format cannot reload a
  Horovod-wrapped optimizer (STACK.md); a tf.train.Checkpoint restores weights, optimizer slots,
  the iteration counter and the learning rate.
* Save: rank 0 only, at the end of every epoch: write locally, then commit (upload, manifest last)
  to the checkpoint URL with retention. A commit that fails raises: the job stops with the
  storage's error instead of training on without checkpoints.
* Resume: rank 0 fetches the newest checkpoint whose files verify and broadcasts the resume point
  (or its error) to every rank; rank 0 restores it, then every model and optimizer variable is
  broadcast from rank 0, so all ranks continue with identical weights and optimizer state at
  the saved epoch and step. Only rank 0 needs access to the storage.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from ringtrain.checkpoint import Store, commit, find_latest, open_store
from ringtrain.errors import CheckpointError
from ringtrain.rank import envvars

CKPT_PREFIX = "ckpt"
FORMAT = "tf.train.Checkpoint/keras2"


@dataclass(frozen=True, slots=True)
class ResumePoint:
    step: int
    epoch: int
    manifest: str
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_checkpoint_url(flag: str | None) -> str:
    """--checkpoint, else $RINGTRAIN_CHECKPOINT_URL, else $RINGTRAIN_RUN_DIR/checkpoints."""
    if flag:
        return flag
    env = os.environ.get(envvars.CHECKPOINT_URL)
    if env:
        return env
    return str(Path(os.environ.get(envvars.RUN_DIR, ".")).absolute() / "checkpoints")


def tf_checkpoint(model: Any, optimizer: Any) -> Any:
    """The object graph saved and restored: weights, optimizer state, epoch."""
    return tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=tf.Variable(0, tf.int64))


def _state_variables(model: Any, optimizer: Any) -> list[Any]:
    variables = list(model.variables) + list(optimizer.variables)
    lr = getattr(optimizer, "learning_rate", None)
    if isinstance(lr, tf.Variable):
        variables.append(lr)
    return variables


def _fetch_on_rank0(url: str, staging: Path) -> dict[str, Any]:
    """What rank 0 broadcasts: the resume point, nothing, or an error to raise everywhere."""
    try:
        restored = find_latest(open_store(url), staging)
    except CheckpointError as err:
        return {"error": err.message, "hint": err.hint}
    if restored is None:
        return {}
    point = ResumePoint(
        restored.step, restored.epoch, restored.manifest.name, restored.skipped
    )
    return {"point": point.to_dict(), "dir": str(restored.directory)}


def restore_or_broadcast(
    model: Any, optimizer: Any, url: str, staging: Path, *, hvd: Any
) -> ResumePoint | None:
    """Resume every rank from the newest verified checkpoint, or start all from rank 0's init.

    ``hvd`` is ``horovod.tensorflow`` (for broadcast_object/broadcast_variables).
    """
    optimizer.build(model.trainable_variables)  # create the slots so they restore at once
    answer = _fetch_on_rank0(url, staging) if hvd.rank() == 0 else None
    answer = hvd.broadcast_object(answer, root_rank=0, name="ringtrain.resume")
    if "error" in answer:
        raise CheckpointError(answer["error"], answer["hint"])
    point = None
    if "point" in answer:
        raw = answer["point"]
        point = ResumePoint(raw["step"], raw["epoch"], raw["manifest"], tuple(raw["skipped"]))
        if hvd.rank() == 0:
            ckpt = tf_checkpoint(model, optimizer)
            ckpt.read(str(Path(answer["dir"]) / CKPT_PREFIX)).assert_existing_objects_matched()
            if int(optimizer.iterations.numpy()) != point.step:
                raise CheckpointError(
                    f"checkpoint {point.manifest} holds step "
                    f"{int(optimizer.iterations.numpy())}, its manifest says {point.step}",
                    "the checkpoint was not written by this training script; use another URL",
                )
    hvd.broadcast_variables(_state_variables(model, optimizer), root_rank=0)
    return point


class CommitCheckpoint(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Rank 0: at each epoch end, write a tf.train.Checkpoint locally and commit it."""

    def __init__(
        self,
        store: Store,
        optimizer: Any,
        *,
        staging: Path,
        keep: int = 3,
        meta: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.optimizer = optimizer
        self.staging = staging
        self.keep = keep
        self.meta = dict(meta or {})
        self.last_committed: int | None = None

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        done = epoch + 1
        step = int(self.optimizer.iterations.numpy())
        local = self.staging / f"save-{done}"
        shutil.rmtree(local, ignore_errors=True)
        ckpt = tf_checkpoint(self.model, self.optimizer)
        ckpt.epoch.assign(done)
        ckpt.write(str(local / CKPT_PREFIX))
        meta = {**self.meta, "format": FORMAT, "saved_at": time.time()}
        meta.update({k: float(v) for k, v in (logs or {}).items()})
        result = commit(self.store, local, step=step, epoch=done, meta=meta, keep=self.keep)
        shutil.rmtree(local, ignore_errors=True)
        self.last_committed = step
        print(
            f"checkpoint: committed epoch {done} step {step} to {result.url} "
            f"({result.manifest.total_bytes / 1e6:.2f} MB in {result.seconds:.2f} s)",
            flush=True,
        )


class FailAtEpoch(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Fault injection: this rank exits with status 1 at batch 2 of the 1-based ``epoch``.

    By then rank 0 has committed epoch-1 (batches need every rank), so a relaunch resumes there.
    """

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch
        self.current = -1

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.current = epoch + 1

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if self.current == self.epoch and batch >= 1:
            print(f"fault injection: exiting at epoch {self.epoch}, batch {batch}", flush=True)
            os._exit(1)


def make_staging() -> Path:
    return Path(tempfile.mkdtemp(prefix="ringtrain-ckpt-"))
