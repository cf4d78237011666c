"""Each epoch's end, for ``ringtrain.keras``: ``callbacks()`` for ``model.fit`` (a checkpoint
commit, progress reports, every rank's step times) and ``save()`` for a custom loop; rank 0
writes a tf.train.Checkpoint locally and commits it through ``ringtrain.checkpoint`` in the
background (``uploader``), riding out a storage outage shorter than the grace."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import tensorflow as tf

from ringtrain.checkpoint import commit
from ringtrain.checkpoint.store import StorageError
from ringtrain.errors import CheckpointError
from ringtrain.keras import memory, state
from ringtrain.keras import world as keras_world
from ringtrain.keras.fitend import FreeAtTrainEnd
from ringtrain.keras.state import (
    CKPT_PREFIX,
    FORMAT,
    _optimizer,
    _tell_launcher,
    _tf_checkpoint,
    checkpoint_url,
    variable_shapes,
)
from ringtrain.keras.steps import StepTimer
from ringtrain.keras.uploader import UPLOADER
from ringtrain.rank import agent, envvars, preempt
from ringtrain.rank.progress import report as progress

DEFAULT_GRACE_S = 60.0


def callbacks(
    *,
    batch_size: int | None = None,
    url: str | None = None,
    keep: int = 3,
    meta: dict[str, Any] | None = None,
    progress_every_s: float = 1.0,
    commit_every: int = memory.DEFAULT_COMMIT_EVERY,
    async_commit: bool = True,
) -> list[Any]:
    """Keras callbacks for ``model.fit``: on rank 0, a checkpoint commit at every epoch end
    and progress reports (epoch, step, loss, samples/s with ``batch_size``, per rank); on
    every rank, its step times for straggler detection (``ringtrain.keras.steps``) and, under
    ``ringtrain launch --elastic``, a commit to memory every ``commit_every`` steps
    (``ringtrain.keras.memory``). Under Horovod, checkpoints upload in the background while
    training goes on (``async_commit=False``: every rank waits for each upload; TF's own
    strategies always wait). Add them after Horovod's own callbacks."""
    world = keras_world.world()
    where = checkpoint_url(url)
    _tell_launcher(checkpoint=where, progress=True)
    # in the background under Horovod only: TF's strategies write mirrored variables with
    # their own collectives, which every worker must run in step (a snapshot TF takes in the
    # background on worker 0 alone mismatched them)
    async_commit = async_commit and world.kind == keras_world.HOROVOD
    # step times around the all-reduce; under parameter servers only the chief runs callbacks
    timer: list[Any] = [StepTimer(every_s=progress_every_s)] if world.kind != keras_world.PS else []
    if world.kind == keras_world.HOROVOD and memory.enabled():
        timer.append(memory.MemoryCommit(commit_every))  # last: the checkpoint commits first
    timer.append(FreeAtTrainEnd())  # fit's own iterator freed aside at its end (fitend)
    if world.kind == keras_world.HOROVOD and memory.under_elastic_driver():
        # a script in hvd.elastic.run keeps these callbacks across resets, and rank 0 may then
        # be another process: every rank holds them, whichever is rank 0 at the time acts
        ckpt = CommitCheckpoint(where, keep=keep, meta=meta, rank0_now=True,
                                background=async_commit)
        return [ckpt, PreemptCommit(ckpt),
                ProgressCallback(batch_size, every_s=progress_every_s, rank0_now=True), *timer]
    if world.rank() != 0:
        if not world.all_write:
            return timer
        # MultiWorkerMirrored: every worker writes the checkpoint, worker 0 commits it
        return [CommitCheckpoint(where, keep=keep, meta=meta, commit=False), *timer]
    if world.kind == keras_world.PS:  # its Keras refuses batch-level callbacks
        report: Any = EpochProgressCallback(batch_size, world_size=world.size())
    else:
        report = ProgressCallback(batch_size, world_size=world.size(), every_s=progress_every_s)
    ckpt = CommitCheckpoint(where, keep=keep, meta=meta, background=async_commit)
    preempted = [PreemptCommit(ckpt)] if world.kind == keras_world.HOROVOD else []
    return [ckpt, *preempted, report, *timer]


def save(
    model: Any,
    optimizer: Any = None,
    *,
    epoch: int,
    url: str | None = None,
    keep: int = 3,
    meta: dict[str, Any] | None = None,
    loss: float | None = None,
    async_commit: bool = True,
) -> None:
    """For a custom loop, at the end of an epoch (``epoch`` counts finished epochs): rank 0
    commits a checkpoint (in the background; ``async_commit=False``: here); every rank reports
    progress. Other ranks do not touch storage. The last upload is awaited when the script
    ends under ``ringtrain launch`` (or ``rt.wait_for_commits()``)."""
    world = keras_world.world(model)
    optimizer = _optimizer(model, optimizer)
    where = checkpoint_url(url)
    _tell_launcher(checkpoint=where, progress=True)
    step = int(optimizer.iterations.numpy())
    if world.rank() == 0 or world.all_write:
        _commit(model, optimizer, where, epoch=epoch, step=step, keep=keep, meta=meta or {},
                commit=world.rank() == 0,
                background=async_commit and world.kind == keras_world.HOROVOD)
    progress(epoch=epoch, step=step, loss=loss)
    if world.kind == keras_world.HOROVOD and memory.enabled() and memory.MEMORY.bound:
        memory.commit_now(epoch, 0)  # the epoch's end, in memory too (--elastic)


# ------------------------------------------------------------------------------ callbacks


class CommitCheckpoint(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Rank 0: at each epoch end, write a tf.train.Checkpoint locally and commit it (with
    ``commit=False``, only write it: the other workers of a MultiWorkerMirroredStrategy)."""

    def __init__(self, url: str, *, keep: int = 3, meta: dict[str, Any] | None = None,
                 commit: bool = True, rank0_now: bool = False, background: bool = True) -> None:
        super().__init__()
        self.background = background  # upload while training goes on (uploader.py)
        self.url = url
        self.keep = keep
        self.meta = dict(meta or {})
        self.commit = commit  # False: write only (MultiWorkerMirrored's other workers)
        self.rank0_now = rank0_now  # act only while this process is rank 0 (--elastic)
        self.last_committed: int | None = None
        self.epoch = 0  # the epoch under way (0-based): epochs finished so far

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.rank0_now and keras_world.world().rank() != 0:
            return
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        meta = {**self.meta, **{k: _number(v) for k, v in (logs or {}).items()}}
        _commit(self.model, optimizer, self.url, epoch=epoch + 1, step=step, keep=self.keep,
                meta=meta, commit=self.commit, background=self.background)
        self.last_committed = step

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        UPLOADER.wait()  # the last epoch's upload, before fit returns; its failure raised here


class PreemptCommit(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """A preemption notice (SIGUSR1 to the launcher): rank 0 commits at the batch end, at once,
    and says so; the launcher then ends the job. Horovod only (``callbacks()`` adds it there):
    rank 0 alone holds the whole model, and the other ranks wait in their next all-reduce
    meanwhile; TF's strategies would need every worker in step, and ParameterServerStrategy
    refuses batch-level callbacks. The resumed job starts this epoch again from these weights."""

    def __init__(self, checkpoint: CommitCheckpoint) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.committed = False

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        c = self.checkpoint
        if self.committed or not preempt.requested() or keras_world.world().rank() != 0:
            return
        self.committed = True
        UPLOADER.wait()  # the epoch's upload in flight first: commits stay in order
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        if step != c.last_committed:
            _commit(self.model, optimizer, c.url, epoch=c.epoch, step=step, keep=c.keep,
                    meta={**c.meta, "preempted": True}, background=False)
            c.last_committed = step
        current = agent.agent()
        if current is not None:
            current.send("preempt_committed", epoch=c.epoch, step=step)


class ProgressCallback(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Report epoch, step, loss and throughput to the launcher at most every ``every_s``.

    ``batch_size`` is the per-rank batch, ``world_size`` the number of ranks (global samples/s
    = both multiplied); without a batch size, samples/s is not reported."""

    def __init__(self, batch_size: int | None, world_size: int = 1, every_s: float = 1.0,
                 rank0_now: bool = False) -> None:
        super().__init__()
        self.batch_size, self.world_size = batch_size, world_size
        self.rank0_now = rank0_now  # only while rank 0, world size read then (--elastic)
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
        size = self.world_size
        if self.rank0_now:
            world = keras_world.world()
            if world.rank() != 0:
                return
            size = world.size()
        rate = None
        if self.batch_size:
            rate = (self._window_steps * self.batch_size * size
                    / max(now - self._window_start, 1e-9))
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


def _number(value: Any) -> float:
    """A Keras log value as a float; under ParameterServerStrategy batch logs are RemoteValues
    (the step may still be running on a worker): fetched first."""
    fetch = getattr(value, "fetch", None)
    return float(fetch() if callable(fetch) else value)


def _commit(
    model: Any, optimizer: Any, url: str, *, epoch: int, step: int, keep: int,
    meta: dict[str, Any], commit: bool = True, background: bool = True,
) -> None:
    """Write the checkpoint locally (the snapshot), then commit it: in the background
    (``uploader``: at most one upload in flight; this commit first waits for the last one to
    end) or, ``background=False``, here. A storage
    outage shorter than the grace (``--checkpoint-grace``) costs a wait, a longer one skips
    this checkpoint with a warning, and only a second checkpoint in a row lost to it stops
    training (the last good one stays intact)."""
    if commit and background:
        UPLOADER.before(f"epoch {epoch}")  # the last upload's failure, or its end
    local = state._STATE.staging_dir() / f"save-{epoch}-{step}"
    shutil.rmtree(local, ignore_errors=True)
    try:
        ckpt = _tf_checkpoint(model, optimizer)
        ckpt.epoch.assign(epoch)
        started = time.monotonic()
        # in the background: TensorFlow's own async checkpoint copies the variables to host
        # memory and writes them in its thread (ckpt.sync() in the upload waits for the files)
        ckpt.write(str(local / CKPT_PREFIX), options=_write_options(commit and background))
        UPLOADER.snapshots_s.append(time.monotonic() - started)
    except BaseException:
        shutil.rmtree(local, ignore_errors=True)
        raise
    if not commit:
        shutil.rmtree(local, ignore_errors=True)
        return
    meta = {**meta, "format": FORMAT, "saved_at": time.time(),
            "variables": variable_shapes(model)}

    def upload() -> None:
        try:
            _sync(ckpt)  # the snapshot's files written
            result = _commit_within_grace(url, local, step=step, epoch=epoch, meta=meta,
                                          keep=keep)
        finally:
            shutil.rmtree(local, ignore_errors=True)
        if result is not None:
            print(f"checkpoint: committed epoch {epoch} step {step} to {result.url} "
                  f"({result.manifest.total_bytes / 1e6:.2f} MB in {result.seconds:.2f} s"
                  f"{', in the background' if background else ''})", flush=True)

    if background:
        UPLOADER.start(upload, f"epoch {epoch}")
    else:
        upload()


def _write_options(in_background: bool) -> Any:
    """tf.train.CheckpointOptions: TensorFlow's async checkpoint when asked and known (TF 2.12+;
    older ones write here, which is only slower)."""
    if in_background:
        try:
            return tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
        except TypeError:
            pass
    return tf.train.CheckpointOptions()


def _sync(ckpt: Any) -> None:
    sync = getattr(ckpt, "sync", None)
    if callable(sync):
        sync()


def _commit_within_grace(
    url: str, local: Path, *, step: int, epoch: int, meta: dict[str, Any], keep: int
) -> Any:
    grace = float(os.environ.get(envvars.CHECKPOINT_GRACE) or DEFAULT_GRACE_S)
    deadline = time.monotonic() + grace
    delay = 1.0
    while True:
        try:
            result = commit(state._STATE.store(url), local, step=step, epoch=epoch, meta=meta,
                            keep=keep)
        except StorageError as err:
            if not err.transient:
                raise
            if time.monotonic() + delay > deadline:
                state._STATE.skipped += 1
                if state._STATE.skipped > 1:
                    raise CheckpointError(
                        f"the checkpoint storage has been down for {state._STATE.skipped} "
                        f"checkpoints in a row ({err.message})",
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
            state._STATE.skipped = 0
            return result
