"""In-memory commits and resets: elastic training for a ``ringtrain.keras`` script, with the
same three lines.

Under ``ringtrain launch --elastic`` (Horovod's elastic driver: ``HOROVOD_ELASTIC=1``) a script
written from Horovod's plain tf.keras recipe, with no ``hvd.elastic`` in it, keeps its surviving
processes through a lost rank or host, and takes in new ones:

* ``callbacks()`` adds ``MemoryCommit`` on every rank: every ``commit_every`` steps (and at each
  epoch end) the model's and optimizer's variables are copied to host memory with the epoch and
  the step (Horovod's ``State.commit``, whose host-update check also makes every rank stop at
  the same commit when hosts were added or removed).
* When a collective fails (a rank is gone) or the driver says the hosts changed, the exception
  leaves ``model.fit`` and the script. The rank entry (``ringtrain.rank.entry``) asks ``reset``
  here: it shuts Horovod down, clears Keras' session and runs the script again in the same
  process, so TensorFlow and Horovod are not imported again. The script's own ``hvd.init()``
  joins the new ring (what ``hvd.elastic.run``'s reset does), its model is built again, and
  its learning rate is scaled by the new ``hvd.size()`` again.
* ``resume(model)`` then restores from memory instead of the checkpoint store: every rank says
  how many commits it holds, the rank with the most sends its copy (a new process holds none),
  and the epoch and step go with it. The learning rate is not restored: the script set it for
  the new world size; the rank says when it differs. ``fit`` starts at that step of that epoch
  (``MemoryCommit`` gives Keras the counters as its ``BackupAndRestore`` callback does), so a
  reset loses at most ``commit_every`` steps.

A script that calls ``hvd.elastic.run`` itself (Horovod's elastic examples) keeps Horovod's own
state: ``MemoryCommit`` then does nothing (one commit protocol per script).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ringtrain.errors import UsageError
from ringtrain.rank import abort, agent, rerun

DEFAULT_COMMIT_EVERY = 10
SLOW_STEP_S = 0.5  # a reset's step that takes longer is said (a re-form waits on the slowest)
# a Horovod collective's op name (HorovodAllreduce, HorovodGroupedAllreduce, HorovodAllgather,
# HorovodBroadcast, HorovodReducescatter, HorovodAlltoall, ...): Horovod's own elastic wrapper
# knows only the first three and swallows the rest, so a grouped all-reduce's failure ended the
# worker with exit 0 (horovod#3852)
_HOROVOD_OP = re.compile(r"(?<![A-Za-z])Horovod(?:Grouped)?[A-Z][a-z]+")


def under_elastic_driver(environ: Any = os.environ) -> bool:
    """Horovod's elastic driver started this process (ranks may change at a reset)."""
    return bool(environ.get("HOROVOD_ELASTIC") == "1")


def enabled(environ: Any = os.environ) -> bool:
    """Horovod's elastic driver started this process, and ringtrain's rank entry runs the
    script (it is what runs it again after a reset: ``ringtrain.rank.rerun``)."""
    return under_elastic_driver(environ) and rerun.enabled()


def _check_every(every: int, name: str) -> None:
    if every < 1:
        raise UsageError(f"{name} must be at least 1, not {every}",
                         f"pass {name}=N: steps between in-memory commits")


def world_changed(exc: BaseException) -> str | None:
    """Why ``exc`` means the ring must be formed again, or None when it is any other error.
    Horovod's own test (``horovod.tensorflow.elastic.run``): its internal error, its hosts
    update, or TensorFlow's UnknownError from any of its collective ops (Horovod's own list
    misses the grouped all-reduce)."""
    from horovod.common.exceptions import (  # noqa: PLC0415 - Horovod only where it is used
        HorovodInternalError,
        HostsUpdatedInterrupt,
    )

    if isinstance(exc, HostsUpdatedInterrupt):
        return "the hosts were updated (removed only)" if exc.skip_sync else (
            "the hosts were updated")
    if isinstance(exc, HorovodInternalError):
        return f"a collective failed ({_first_line(str(exc))})"
    if isinstance(exc, tf.errors.UnknownError):
        message = exc.message or ""
        if _HOROVOD_OP.search(message):
            return f"a collective failed ({_first_line(message)})"
    return None


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class Commit:
    """What a rank holds in memory: how many commits, at which epoch and step (the next step
    to run in that epoch), with which world size."""

    count: int
    epoch: int
    batch: int
    size: int
    lr: float | None = None  # the learning rate then (not restored: see state_variables)


def source_rank(counts: list[int]) -> int | None:
    """The rank whose copy every rank takes: the most commits, the lowest rank among equals;
    None when no rank holds one (a new job: the checkpoint store decides). Pure."""
    best = max(range(len(counts)), key=lambda r: (counts[r], -r), default=None)
    return None if best is None or counts[best] <= 0 else best


class Memory:
    """This process's in-memory commits, kept across the script's runs (a module global)."""

    def __init__(self) -> None:
        self.commit = Commit(0, 0, 0, 0)
        self.values: list[np.ndarray[Any, Any]] = []
        self.state: Any = None  # Horovod's State: host-update messages from the driver
        self.resets = 0
        self.reset_at: float | None = None
        self.pending: tuple[int, int] | None = None  # (epoch, step) for the next fit
        self.bound: tuple[Any, Any] | None = None  # (model, optimizer) of this run: resume's

    def listen(self) -> Any:
        """Horovod's elastic State for this process, registered with its notification
        service (once): the driver's host updates arrive on it."""
        if self.state is None:
            import horovod.tensorflow as hvd  # noqa: PLC0415
            from horovod.common.elastic import (  # noqa: PLC0415
                State,
                notification_manager,
            )

            self.state = State(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
            notification_manager.init()
            notification_manager.register_listener(self.state)
        return self.state

    def keep(self, variables: list[Any], commit: Commit) -> None:
        self.values = [np.array(v.numpy(), copy=True) for v in variables]
        self.commit = commit

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.values))


MEMORY = Memory()


def foreign_state() -> bool:
    """The script runs ``hvd.elastic.run`` with its own State (Horovod's elastic examples)."""
    from horovod.common.elastic import notification_manager  # noqa: PLC0415

    return any(s is not MEMORY.state for s in notification_manager._listeners)


def state_variables(model: Any, optimizer: Any) -> list[Any]:
    """What a memory commit copies: the model's and the optimizer's variables (its step
    counter and slots), not the learning rate (the script sets it for the world size)."""
    return list(model.variables) + list(optimizer.variables)


class MemoryCommit(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Every rank: commit to memory every ``every`` steps and at each epoch end; the first
    ``fit`` after a reset starts at the committed step (Keras' own mid-epoch resume hook)."""

    def __init__(self, every: int = DEFAULT_COMMIT_EVERY) -> None:
        super().__init__()
        _check_every(every, "commit_every")
        self.every = every
        self._epoch = 0
        self._since = 0
        self._off = False

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._off = foreign_state()
        if self._off or MEMORY.pending is None:
            return
        epoch, batch = MEMORY.pending
        MEMORY.pending = None
        if batch > 0:  # read by Model.fit right after on_train_begin
            self.model._training_state = _StartAt(epoch, batch)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._since = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._off:
            return
        self._since += 1
        if self._since >= self.every:
            self._commit(self._epoch, batch + 1)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self._off:
            self._commit(epoch + 1, 0)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if isinstance(getattr(self.model, "_training_state", None), _StartAt):
            self.model._training_state = None

    def _commit(self, epoch: int, batch: int) -> None:
        self._since = 0
        _commit(self.model, self.model.optimizer, epoch, batch)


def batches(dataset: Any, epoch: int, every: int = DEFAULT_COMMIT_EVERY) -> Any:
    """For a custom loop: ``for x, y in rt.batches(dataset, epoch):``. Outside ``--elastic``
    the dataset itself. Under it, the same batches, from the committed step when the script
    runs again after a reset (the first ``step`` batches skipped), and after every ``every``
    steps trained a commit to memory of the model and optimizer given to ``rt.resume``
    (before the next batch is read: the step before it has run)."""
    if not enabled():
        return dataset
    _check_every(every, "every")
    if MEMORY.bound is None:
        raise UsageError("ringtrain.keras.batches: call rt.resume(model, optimizer) first",
                         "resume names the model and optimizer whose state is committed")
    return _committing(dataset, epoch, every)


def _committing(dataset: Any, epoch: int, every: int) -> Any:
    step = 0
    if MEMORY.pending is not None and MEMORY.pending[0] == epoch:
        step = MEMORY.pending[1]
        MEMORY.pending = None
        dataset = dataset.skip(step)
    since = 0
    for batch in dataset:
        yield batch
        step += 1  # the loop asked for the next batch: the step on this one has run
        since += 1
        if since >= every:
            since = 0
            commit_now(epoch, step)


def commit_now(epoch: int, step: int) -> None:
    """Commit the model and optimizer given to ``rt.resume`` to memory at (epoch, step).
    ``rt.batches`` calls it every N steps, ``rt.save`` at each epoch end."""
    assert MEMORY.bound is not None
    _commit(*MEMORY.bound, epoch, step)


def _commit(model: Any, optimizer: Any, epoch: int, step: int) -> None:
    """One memory commit, then Horovod's host-update check (every rank at the same step: a
    change raises on all of them together)."""
    import horovod.tensorflow as hvd  # noqa: PLC0415

    MEMORY.keep(state_variables(model, optimizer),
                Commit(MEMORY.commit.count + 1, epoch, step, hvd.size(),
                       learning_rate(optimizer)))
    MEMORY.listen().check_host_updates()


class _StartAt:
    """Keras' worker-training-state hook (``Model._training_state``, which its BackupAndRestore
    callback sets): ``fit`` asks it for the epoch and step to start at."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch, self.batch = epoch, batch

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch: Any, initial_epoch: int,
                                              mode: Any = None) -> tuple[int, int]:
        if steps_per_epoch and self.batch >= int(steps_per_epoch):  # the epoch got shorter
            return self.epoch + 1, 0
        return self.epoch, self.batch


def restore(model: Any, optimizer: Any) -> int | None:
    """On every rank, after a reset (or in a process that joined a running job): take the
    newest in-memory commit any rank holds. Returns the epoch to start at, or None when no
    rank holds one (the checkpoint store decides)."""
    import horovod.tensorflow as hvd  # noqa: PLC0415
    from horovod.tensorflow.functions import allgather_object  # noqa: PLC0415

    MEMORY.listen()
    MEMORY.bound = (model, optimizer)
    source = source_rank(list(allgather_object(MEMORY.commit.count,
                                               name="ringtrain.elastic.counts")))
    if source is None:
        return None
    began = time.monotonic()
    optimizer.build(model.trainable_variables)
    variables = state_variables(model, optimizer)
    commit = hvd.broadcast_object(MEMORY.commit, root_rank=source,
                                  name="ringtrain.elastic.commit")
    if hvd.rank() == source:
        if len(MEMORY.values) != len(variables) or any(
                tuple(v.shape) != a.shape for v, a in zip(variables, MEMORY.values, strict=False)):
            raise UsageError("ringtrain.keras: after the reset the script built another model "
                             "than the one committed to memory",
                             "build the same model on every run of the script")
        for var, value in zip(variables, MEMORY.values, strict=True):
            var.assign(value)
    hvd.broadcast_variables(variables, root_rank=source)
    lr = learning_rate(optimizer)
    MEMORY.keep(variables, Commit(commit.count, commit.epoch, commit.batch, hvd.size(), lr))
    MEMORY.pending = (commit.epoch, commit.batch)
    if hvd.rank() == 0:
        _tell("elastic_restored", source=source, epoch=commit.epoch, step=commit.batch,
              size=int(hvd.size()), nbytes=MEMORY.nbytes)
        print(describe(commit, source=source, size=hvd.size(), lr=lr, nbytes=MEMORY.nbytes,
                       took_s=time.monotonic() - began,
                       since_reset_s=(None if MEMORY.reset_at is None
                                      else time.monotonic() - MEMORY.reset_at)), flush=True)
    return int(commit.epoch)


def describe(commit: Commit, *, source: int, size: int, lr: float | None, nbytes: int,
             took_s: float, since_reset_s: float | None) -> str:
    """Rank 0's line after a memory restore. Pure."""
    text = (f"ringtrain: elastic: resumed in memory at epoch {commit.epoch} step {commit.batch} "
            f"from rank {source} ({nbytes / 1e6:.2f} MB in {took_s:.2f} s); "
            f"{commit.size} -> {size} ranks")
    if commit.lr is not None and lr is not None and not np.isclose(commit.lr, lr):
        text += f"; learning rate {commit.lr:g} -> {lr:g}, as the script sets it for {size} ranks"
    if since_reset_s is not None:
        text += f"; {since_reset_s:.1f} s after the reset"
    return text


def learning_rate(optimizer: Any) -> float | None:
    lr = getattr(optimizer, "learning_rate", None)
    return float(lr.numpy()) if isinstance(lr, tf.Variable) else None


def reset(exc: BaseException) -> bool:
    """The rank entry's question after the script raised ``exc``: run it again? Yes when the
    ring must be formed again (and this process is elastic): Horovod is shut down, Keras'
    session cleared, and the rank says why."""
    if not enabled():
        return False
    why = world_changed(exc)
    if why is None:
        return False
    import horovod.tensorflow as hvd  # noqa: PLC0415

    rank = _rank_or_none(hvd)
    _tell("elastic_reset")
    MEMORY.resets += 1
    MEMORY.reset_at = time.monotonic()
    # Horovod's background thread may still wait in a collective on a live peer (until
    # Gloo's timeout), and hvd.shutdown() waits for it: end the ring's connections first, so
    # it and the peers that wait on this rank fail now (rank/abort.py)
    shut = abort.abort()
    who = "?" if rank is None else rank  # no rank: its hvd.init() failed (a re-form's fault)
    sys.stderr.write(f"ringtrain: elastic: rank {who} (pid {os.getpid()}): {why}; forming "
                     f"the ring again and running the script again in this process (reset "
                     f"{MEMORY.resets}, last memory commit: epoch {MEMORY.commit.epoch} step "
                     f"{MEMORY.commit.batch}; {shut} ring connection(s) shut down)\n")
    began = time.monotonic()
    hvd.shutdown()
    took = {"Horovod's shutdown": time.monotonic() - began}
    if MEMORY.state is not None:
        MEMORY.state.on_reset()  # host updates queued before the reset are covered by it
    began = time.monotonic()
    tf.keras.backend.clear_session()
    took["Keras' clear_session"] = time.monotonic() - began
    slow = [f"{what} took {s:.1f} s" for what, s in took.items() if s >= SLOW_STEP_S]
    if slow:
        sys.stderr.write(f"ringtrain: elastic: rank {who} (pid {os.getpid()}): "
                         + "; ".join(slow) + "\n")
    return True


def _tell(kind: str, **fields: Any) -> None:
    """Tell the launcher (its ledger's elastic stages), when one supervises this rank."""
    line = agent.agent()
    if line is not None:
        line.send(kind, **fields)


def _rank_or_none(hvd: Any) -> int | None:
    try:
        return int(hvd.rank())
    except ValueError:  # not initialised
        return None


rerun.register(reset)
