"""What ``ringtrain.keras``'s resume and save share: where checkpoints go, the open stores, the
local staging directory, what was resumed, and the object graph a checkpoint holds."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from ringtrain.checkpoint import Store, open_store
from ringtrain.checkpoint.location import Location
from ringtrain.errors import UsageError
from ringtrain.rank import agent, cleanup, envvars

CKPT_PREFIX = "ckpt"
FORMAT = "tf.train.Checkpoint/keras2"


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where training resumed: the committed step and epoch, the manifest's name, and newer
    checkpoints that were skipped because their files did not verify."""

    step: int
    epoch: int
    manifest: str
    skipped: tuple[str, ...] = ()


def checkpoint_url(url: str | None = None) -> str:
    """``url``, else the launch's ``--checkpoint`` ($RINGTRAIN_CHECKPOINT_URL), else
    ``$RINGTRAIN_RUN_DIR/checkpoints`` (``./checkpoints`` outside ringtrain)."""
    if url:
        return url
    env = os.environ.get(envvars.CHECKPOINT_URL)
    if env:
        return env
    return Location.default(Path(os.environ.get(envvars.RUN_DIR, "."))).text


@dataclass
class _State:
    resumed: ResumePoint | None = None
    skipped: int = 0  # checkpoints in a row lost to a storage outage
    staging: Path | None = None
    stores: dict[str, Store] | None = None

    def store(self, url: str) -> Store:
        if self.stores is None:
            self.stores = {}
        if url not in self.stores:
            self.stores[url] = open_store(url)
        return self.stores[url]

    def staging_dir(self) -> Path:
        if self.staging is None:
            self.staging = Path(tempfile.mkdtemp(prefix="ringtrain-ckpt-"))
            cleanup.at_exit(shutil.rmtree, self.staging, True)  # also on a failing rank's exit
        return self.staging


# the process's one state; read as ``state._STATE`` at call time (tests replace it)
_STATE = _State()


def _optimizer(model: Any, optimizer: Any) -> Any:
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if optimizer is None:
        raise UsageError(
            "no optimizer: the model is not compiled and none was passed",
            "call model.compile(optimizer=hvd.DistributedOptimizer(...)) first, or pass "
            "resume(model, optimizer) / save(model, optimizer, epoch=...)",
        )
    return optimizer


def _tell_launcher(**parts: Any) -> None:
    current = agent.agent()
    if current is not None:
        current.api(**parts)


def variable_shapes(model: Any) -> list[list[Any]]:
    """The model's variables as [name, shape] pairs, in order: what a checkpoint records so a
    different model is told apart before TensorFlow is asked to restore into it."""
    return [[str(v.name), [int(d) for d in v.shape]] for v in model.weights]


def mismatch(recorded: Any, model: list[list[Any]], limit: int = 3) -> list[str]:
    """The first differences between a checkpoint's recorded variables and the model's, by
    position (as TensorFlow restores them: a layer renamed ``dense_1`` still matches), as
    ``name: checkpoint (784, 128) vs model (784, 64)`` lines; empty when they match, or the
    checkpoint recorded none (written before ringtrain recorded them)."""
    if not isinstance(recorded, list):
        return []
    theirs = [(str(v[0]), tuple(v[1])) for v in recorded if isinstance(v, list) and len(v) == 2]
    ours = [(str(name), tuple(shape)) for name, shape in model]
    out: list[str] = []
    for i in range(max(len(theirs), len(ours))):
        mine = ours[i] if i < len(ours) else None
        kept = theirs[i] if i < len(theirs) else None
        if (mine and mine[1]) != (kept and kept[1]):
            name = (mine or kept or ("?", ()))[0]
            out.append(f"{name}: checkpoint {_shape(kept[1] if kept else None)} vs model "
                       f"{_shape(mine[1] if mine else None)}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def _shape(shape: tuple[int, ...] | None) -> str:
    return "absent" if shape is None else str(shape)


def _tf_checkpoint(model: Any, optimizer: Any) -> Any:
    """The object graph saved and restored: weights, optimizer state, epoch."""
    return tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=tf.Variable(0, tf.int64))
