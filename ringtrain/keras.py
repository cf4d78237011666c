"""ringtrain.keras: checkpoints, resume and progress for your own tf.keras + Horovod script.

A script written from Horovod's tf.keras recipe gains, with three added lines, rank-0 atomic
checkpoints to the launch's ``--checkpoint`` URL (a path, file://, s3://, hdfs://; by default
the run directory), automatic resume of weights, optimizer state and epoch on every rank after
a restart, and progress reports for the launcher's live view and stall detection::

    import ringtrain.keras as rt                                  # +1
    ...
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss=..., metrics=[...])
    initial_epoch = rt.resume(model)                              # +2
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), ...]
    callbacks += rt.callbacks(batch_size=batch_size)              # +3
    model.fit(x, y, epochs=epochs, initial_epoch=initial_epoch, callbacks=callbacks, ...)

A custom loop (``tf.GradientTape`` + ``hvd.DistributedGradientTape``) uses ``resume`` and
``save`` the same way::

    start = rt.resume(model, optimizer)
    for epoch in range(start, epochs):
        ...                                       # train one epoch
        rt.save(model, optimizer, epoch=epoch + 1)  # rank 0 commits; reports progress

What is saved: ``tf.train.Checkpoint(model=..., optimizer=..., epoch=...)`` (a ``.keras`` file
cannot reload a Horovod-wrapped optimizer). Rank 0 writes it locally, then commits it through
``ringtrain.checkpoint`` (files under a unique prefix, a manifest with sizes and sha256 written
last with exclusive create), keeping the newest ``keep``. ``resume``: rank 0 fetches the newest
checkpoint whose files verify and broadcasts the resume point; rank 0 restores, then every
model and optimizer variable is broadcast from rank 0, so all ranks continue with identical
state. Only rank 0 touches the storage. Outside ringtrain (plain ``horovodrun`` or ``python``)
everything works the same with checkpoints under ``./checkpoints`` unless ``url`` is given.

The same calls work in a script using TensorFlow's own ``MultiWorkerMirroredStrategy`` or
``ParameterServerStrategy`` (``ringtrain launch --strategy tf-multiworker|tf-ps``, or any
``TF_CONFIG``): ``ringtrain.keras_world`` says who rank 0 is and how to broadcast there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from ringtrain import keras_world
from ringtrain.checkpoint import Store, commit, find_latest, open_store
from ringtrain.checkpoint.store import StorageError
from ringtrain.errors import CheckpointError, UsageError
from ringtrain.keras_steps import StepTimer
from ringtrain.rank import agent, cleanup, envvars
from ringtrain.rank.progress import report as progress
from ringtrain.rank.progress import step_time

__all__ = [
    "ResumePoint", "callbacks", "checkpoint_url", "progress", "resume", "save", "step_time",
]

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
    return str(Path(os.environ.get(envvars.RUN_DIR, ".")).absolute() / "checkpoints")


def resume(model: Any, optimizer: Any = None, *, url: str | None = None) -> int:
    """On every rank: restore the newest verified checkpoint, or start every rank from rank
    0's initial weights. Returns the epoch to start at (``initial_epoch``; 0 when new).

    Call it after ``model.compile`` (or, in a custom loop, once the model is built) and after
    ``hvd.init()``. ``optimizer`` defaults to ``model.optimizer``."""
    world = keras_world.world(model)
    optimizer = _optimizer(model, optimizer)
    where = checkpoint_url(url)
    _tell_launcher(resume=True, checkpoint=where)
    point = _restore(model, optimizer, where, world)
    if point is not None and world.rank() == 0:
        print(f"ringtrain: resumed from epoch {point.epoch} step {point.step} ({where})",
              flush=True)
    _STATE.resumed = point
    return point.epoch if point else 0


def resumed() -> ResumePoint | None:
    """What the last ``resume`` restored (None: a new run)."""
    return _STATE.resumed


def callbacks(
    *,
    batch_size: int | None = None,
    url: str | None = None,
    keep: int = 3,
    meta: dict[str, Any] | None = None,
    progress_every_s: float = 1.0,
) -> list[Any]:
    """Keras callbacks for ``model.fit``: on rank 0, a checkpoint commit at every epoch end
    and progress reports (epoch, step, loss, samples/s with ``batch_size``, per rank); on
    every rank, its step times for straggler detection (``ringtrain.keras_steps``). Add them
    after Horovod's own callbacks."""
    world = keras_world.world()
    where = checkpoint_url(url)
    _tell_launcher(checkpoint=where, progress=True)
    # step times around the all-reduce; under parameter servers only the chief runs callbacks
    timer = [StepTimer(every_s=progress_every_s)] if world.kind != keras_world.PS else []
    if world.rank() != 0:
        if not world.all_write:
            return timer
        # MultiWorkerMirrored: every worker writes the checkpoint, worker 0 commits it
        return [CommitCheckpoint(where, keep=keep, meta=meta, commit=False), *timer]
    if world.kind == keras_world.PS:  # its Keras refuses batch-level callbacks
        report: Any = EpochProgressCallback(batch_size, world_size=world.size())
    else:
        report = ProgressCallback(batch_size, world_size=world.size(), every_s=progress_every_s)
    return [CommitCheckpoint(where, keep=keep, meta=meta), report, *timer]


def save(
    model: Any,
    optimizer: Any = None,
    *,
    epoch: int,
    url: str | None = None,
    keep: int = 3,
    meta: dict[str, Any] | None = None,
    loss: float | None = None,
) -> None:
    """For a custom loop, at the end of an epoch (``epoch`` counts finished epochs): rank 0
    commits a checkpoint; every rank reports progress. Other ranks do not touch storage."""
    world = keras_world.world(model)
    optimizer = _optimizer(model, optimizer)
    where = checkpoint_url(url)
    _tell_launcher(checkpoint=where, progress=True)
    step = int(optimizer.iterations.numpy())
    if world.rank() == 0 or world.all_write:
        _commit(model, optimizer, where, epoch=epoch, step=step, keep=keep, meta=meta or {},
                commit=world.rank() == 0)
    progress(epoch=epoch, step=step, loss=loss)


# ------------------------------------------------------------------------------ callbacks


class CommitCheckpoint(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Rank 0: at each epoch end, write a tf.train.Checkpoint locally and commit it (with
    ``commit=False``, only write it: the other workers of a MultiWorkerMirroredStrategy)."""

    def __init__(self, url: str, *, keep: int = 3, meta: dict[str, Any] | None = None,
                 commit: bool = True) -> None:
        super().__init__()
        self.url = url
        self.keep = keep
        self.meta = dict(meta or {})
        self.commit = commit  # False: write only (MultiWorkerMirrored's other workers)
        self.last_committed: int | None = None

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        meta = {**self.meta, **{k: _number(v) for k, v in (logs or {}).items()}}
        _commit(self.model, optimizer, self.url, epoch=epoch + 1, step=step, keep=self.keep,
                meta=meta, commit=self.commit)
        self.last_committed = step


class ProgressCallback(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Report epoch, step, loss and throughput to the launcher at most every ``every_s``.

    ``batch_size`` is the per-rank batch, ``world_size`` the number of ranks (global samples/s
    = both multiplied); without a batch size, samples/s is not reported."""

    def __init__(self, batch_size: int | None, world_size: int = 1, every_s: float = 1.0) -> None:
        super().__init__()
        self.samples_per_step = batch_size * world_size if batch_size else None
        self.every_s = every_s
        self._epoch = 0
        self._last = 0.0
        self._window_start = 0.0
        self._window_steps = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._window_start = time.monotonic()
        self._window_steps = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._window_steps += 1
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._send(batch + 1, logs, now)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._send(self.params.get("steps"), logs, time.monotonic(), epoch_done=True)

    def _send(
        self, step: int | None, logs: dict[str, Any] | None, now: float, epoch_done: bool = False
    ) -> None:
        rate = None
        if self.samples_per_step:
            rate = self._window_steps * self.samples_per_step / max(now - self._window_start, 1e-9)
        loss = (logs or {}).get("loss")
        progress(
            epoch=self._epoch + (1 if epoch_done else 0),
            step=step,
            loss=None if loss is None else _number(loss),
            samples_per_s=rate,
            epochs=self.params.get("epochs"),
            steps=self.params.get("steps"),
        )
        self._last = now


class EpochProgressCallback(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Progress at each epoch end only (no batch hooks: ParameterServerStrategy's Keras
    refuses them): epoch, step, loss and samples/s over the epoch."""

    def __init__(self, batch_size: int | None, world_size: int = 1) -> None:
        super().__init__()
        self.samples_per_step = batch_size * world_size if batch_size else None
        self._started = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._started = time.monotonic()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        steps = self.params.get("steps")
        seconds = max(time.monotonic() - self._started, 1e-9)
        loss = (logs or {}).get("loss")
        progress(epoch=epoch + 1, step=steps, loss=None if loss is None else _number(loss),
                 samples_per_s=(steps * self.samples_per_step / seconds
                                if steps and self.samples_per_step else None),
                 epochs=self.params.get("epochs"), steps=steps)


# ------------------------------------------------------------------------------ internals

DEFAULT_GRACE_S = 60.0


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


_STATE = _State()


def _number(value: Any) -> float:
    """A Keras log value as a float; under ParameterServerStrategy batch logs are RemoteValues
    (the step may still be running on a worker): fetched first."""
    fetch = getattr(value, "fetch", None)
    return float(fetch() if callable(fetch) else value)


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


def _tf_checkpoint(model: Any, optimizer: Any) -> Any:
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
        store = _STATE.store(url)
        _check_writable(store)
        restored = find_latest(store, staging)
    except CheckpointError as err:
        return {"error": err.message, "hint": err.hint}
    if restored is None:
        return {}
    point = {"step": restored.step, "epoch": restored.epoch,
             "manifest": restored.manifest.name, "skipped": list(restored.skipped)}
    return {"point": point, "dir": str(restored.directory)}


def _check_writable(store: Store) -> None:
    """Before the first epoch, not after it: write and remove a small object."""
    rel = f".ringtrain-write-check-{os.getpid()}"
    try:
        store.put_bytes(rel, b"ringtrain checks that checkpoints can be written here\n")
        store.remove(rel)
    except CheckpointError as err:
        raise CheckpointError(
            f"cannot write checkpoints to {store.url}: {err.message}",
            "check the URL, its permissions and credentials (AWS_* variables for s3://), or "
            "pass another --checkpoint",
        ) from None


def _restore(model: Any, optimizer: Any, url: str, world: Any) -> ResumePoint | None:
    if not model.built:
        raise UsageError(
            "ringtrain.keras.resume: the model is not built yet, so its weights cannot be "
            "restored",
            "give the model an Input layer, or call model.build(input_shape) first",
        )
    optimizer.build(model.trainable_variables)  # create the slots so they restore at once
    fetch = _STATE.staging_dir() / "resume"
    answer = _fetch_on_rank0(url, fetch) if world.rank() == 0 else None
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


def _commit(
    model: Any, optimizer: Any, url: str, *, epoch: int, step: int, keep: int,
    meta: dict[str, Any], commit: bool = True,
) -> None:
    """Write and commit; a storage outage shorter than the grace (``--checkpoint-grace``)
    costs a wait, a longer one skips this checkpoint with a warning, and only a second
    checkpoint in a row lost to it stops training (the last good one stays intact)."""
    local = _STATE.staging_dir() / f"save-{epoch}"
    shutil.rmtree(local, ignore_errors=True)
    try:
        ckpt = _tf_checkpoint(model, optimizer)
        ckpt.epoch.assign(epoch)
        ckpt.write(str(local / CKPT_PREFIX))
        if not commit:
            return
        meta = {**meta, "format": FORMAT, "saved_at": time.time()}
        result = _commit_within_grace(url, local, step=step, epoch=epoch, meta=meta, keep=keep)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    if result is None:
        return
    print(
        f"checkpoint: committed epoch {epoch} step {step} to {result.url} "
        f"({result.manifest.total_bytes / 1e6:.2f} MB in {result.seconds:.2f} s)",
        flush=True,
    )


def _commit_within_grace(
    url: str, local: Path, *, step: int, epoch: int, meta: dict[str, Any], keep: int
) -> Any:
    grace = float(os.environ.get(envvars.CHECKPOINT_GRACE) or DEFAULT_GRACE_S)
    deadline = time.monotonic() + grace
    delay = 1.0
    while True:
        try:
            result = commit(_STATE.store(url), local, step=step, epoch=epoch, meta=meta,
                            keep=keep)
        except StorageError as err:
            if not err.transient:
                raise
            if time.monotonic() + delay > deadline:
                _STATE.skipped += 1
                if _STATE.skipped > 1:
                    raise CheckpointError(
                        f"the checkpoint storage has been down for {_STATE.skipped} checkpoints "
                        f"in a row ({err.message})",
                        "bring the storage back and relaunch: training resumes from the last "
                        "committed checkpoint; --checkpoint-grace waits longer",
                    ) from None
                print(f"checkpoint: warning: storage down for {grace:.0f} s ({err.message}); "
                      f"skipping the checkpoint of epoch {epoch}, training goes on", flush=True)
                return None
            print(f"checkpoint: storage unavailable ({err.message}); retrying in {delay:.0f} s",
                  flush=True)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        else:
            _STATE.skipped = 0
            return result
