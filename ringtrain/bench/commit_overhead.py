"""Benchmark: what a checkpoint commit per epoch costs the training, synchronous vs in the
background (issue 26, item 4), on local disk, S3 and HDFS (``ringtrain ckpt bench --train``).

One process trains a Keras model whose weights are ``size_mb`` (one Dense layer, plain SGD: the
checkpoint is the weights) for ``epochs`` epochs of ``steps`` steps, three ways side by side on
each target: no checkpoint (the anchor), ``CommitCheckpoint`` synchronous, and in the
background. The overhead of a commit is the extra wall time per epoch over the anchor, shown as
a share of the epoch's training time: what rank 0 adds to every rank's epoch (in a Horovod job
the others wait for it in the next all-reduce). In the background the training thread pays only
the snapshot (a local write); the upload's hashing and I/O then share the machine's cores with
training, which is what is left of the overhead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODES = ("none", "sync", "async")
INPUTS = 1024


@dataclass(frozen=True, slots=True)
class Overhead:
    target: str
    size_mb: int
    step_s: float  # the anchor's mean step
    epoch_s: dict[str, float]  # mode -> median wall time of an epoch
    snapshot_s: float  # median local write of the checkpoint (the part training waits for)

    def extra_s(self, mode: str) -> float:
        return self.epoch_s[mode] - self.epoch_s["none"]

    def share(self, mode: str) -> float:
        """The commit's cost as a share of an epoch's training time."""
        return self.extra_s(mode) / max(self.epoch_s["none"], 1e-9)


def limit_threads(n: int) -> None:
    """TensorFlow's compute on ``n`` threads (before its first op): leaves the rest of the
    machine to the upload, as a GPU job leaves its host's cores."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)


def measure(target: str, url_of: Callable[[str], str], *, size_mb: int, epochs: int,
            steps: int, wait: Callable[[], None], snapshots: Any = ()) -> Overhead:
    """Train the same model three ways on one target; ``url_of(mode)``: a fresh URL per mode;
    ``wait``: the end of the last background upload (not counted in any epoch);
    ``snapshots``: where the commit records its local writes' times (uploader.snapshots_s)."""
    import tensorflow as tf

    from ringtrain.keras.epochs import CommitCheckpoint

    units = max(1, int(size_mb * 1e6 / 4 / INPUTS))
    x = tf.random.normal((32 * steps, INPUTS))
    y = tf.random.normal((32 * steps, units))
    times: dict[str, float] = {}
    step_s = 0.0
    snapshot_s = 0.0
    for mode in MODES:
        model = tf.keras.Sequential([tf.keras.Input((INPUTS,)), tf.keras.layers.Dense(units)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.001), loss="mse")
        model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)  # trace, warm up
        clock = _epoch_clock()
        cbs: list[Any] = [clock]
        if mode != "none":
            cbs.insert(0, CommitCheckpoint(url_of(mode), keep=1, background=mode == "async"))
        if hasattr(snapshots, "clear"):
            snapshots.clear()
        model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=cbs)
        wait()
        if mode == "async" and snapshots:
            snapshot_s = statistics.median(snapshots)
        times[mode] = statistics.median(clock.epochs[1:] or clock.epochs)  # first: warm-up
        if mode == "none":
            step_s = times[mode] / steps
    return Overhead(target, size_mb, step_s, times, snapshot_s)


def _epoch_clock() -> Any:
    """A callback, placed after the commit, timing each epoch from its start to its end (the
    commit's ``on_epoch_end`` included, the wait for the last upload at ``on_train_end`` not)."""
    import tensorflow as tf

    class EpochClock(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[float] = []
            self._t0 = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.epochs.append(time.perf_counter() - self._t0)

    return EpochClock()
