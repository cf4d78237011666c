"""Each rank's own part of a ``model.fit`` step, measured for straggler detection.

In a synchronous all-reduce job every rank's whole step lasts as long as the slowest rank's:
the fast ones wait inside the all-reduce. What tells the slow rank apart is the time from the
step's start until its gradients are ready (input, forward, backward), before the all-reduce.

``StepTimer`` (added to every rank by ``ringtrain.keras.callbacks()``) wraps Horovod's
``DistributedOptimizer._allreduce`` once, before Keras traces the train step: the traced step
then also writes ``tf.timestamp()``, taken when every gradient exists, into a variable that the
callback reads after the step. The stamp depends only on the gradients (Horovod's all-reduce
ops are not stateful, so TensorFlow orders nothing after it), so the all-reduce overlaps the
backward pass exactly as before. The variable is not an attribute of the optimizer: it is in no
checkpoint and no broadcast. An optimizer without ``_allreduce`` (not Horovod's) leaves the step
untouched; then only the whole step's time is sent, which names nobody in a synchronous job.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import tensorflow as tf

from ringtrain.rank.progress import StepWindow

_READY: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def gradients_ready_stamp(optimizer: Any) -> Any | None:
    """The variable the train step writes the gradients' ready time to (seconds since the
    epoch), set up once per optimizer; None when the optimizer is not Horovod's."""
    if optimizer is None:
        return None
    try:
        known = _READY.get(optimizer)
    except TypeError:  # not weak-referenceable
        return None
    if known is not None:
        return known
    reduce = getattr(optimizer, "_allreduce", None)
    if not callable(reduce):
        return None
    with tf.init_scope():
        ready = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="ringtrain_grads_ready")

    def timed_allreduce(grads: Any, variables: Any) -> Any:
        tensors = [g.values if isinstance(g, tf.IndexedSlices) else g
                   for g in grads if g is not None]
        with tf.control_dependencies(tensors):
            stamp = tf.timestamp()
        ready.assign(stamp)
        return reduce(grads, variables)

    optimizer._allreduce = timed_allreduce
    _READY[optimizer] = ready
    return ready


class StepTimer(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Every rank: each step's own compute time (and whole time) to the launcher, as the
    means of about one second of steps."""

    def __init__(self, every_s: float = 1.0) -> None:
        super().__init__()
        self.window = StepWindow(every_s)
        self._ready: Any = None
        self._t0 = 0.0

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        # fit() calls set_model before it traces the train step: the stamp is in the trace
        self._ready = gradients_ready_stamp(getattr(model, "optimizer", None))

    @property
    def measures_compute(self) -> bool:
        return self._ready is not None

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._t0 = time.time()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.time()
        compute = None
        if self._ready is not None:
            ready = float(self._ready.numpy())
            if self._t0 <= ready <= now:  # written by this step (not a stale one)
                compute = ready - self._t0
        self.window.add(compute, now - self._t0)
