"""Each rank's own part of a ``model.fit`` step, measured for straggler detection.

In a synchronous all-reduce job every rank's whole step lasts as long as the slowest rank's:
the fast ones wait inside the all-reduce. What tells the slow rank apart is the time from the
step's start until its gradients are ready (input, forward, backward), before the all-reduce.

``StepTimer`` (added to every rank by ``ringtrain.keras.callbacks()``) wraps the optimizer's
all-reduce once, before Keras traces the train step: Horovod's
``DistributedOptimizer._allreduce``, or under MultiWorkerMirroredStrategy the Keras optimizer's
``aggregate_gradients`` (its cross-worker sum). The traced step then also writes
``tf.timestamp()``, taken when every gradient exists, into a variable that the callback reads
after the step. The stamp depends only on the gradients (Horovod's all-reduce ops are not
stateful, so TensorFlow orders nothing after it), so the all-reduce overlaps the backward pass
exactly as before; MultiWorkerMirrored sums every gradient at once anyway (measured: whole steps
6.9-7.1 ms with and without the stamp). Under that strategy the variable is a mirrored one
with no aggregation, which TensorFlow updates on the local replica only: nothing crosses
workers. It is not an attribute of the optimizer: it is in no checkpoint and no broadcast. Any
other optimizer leaves the step untouched; then only the whole step's time is sent, which names
nobody in a synchronous job. Under ParameterServerStrategy nothing is timed: only the
coordinator runs Python, and Keras refuses batch-level callbacks there.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import tensorflow as tf

from ringtrain.rank.progress import StepWindow

_READY: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def gradients_ready_stamp(optimizer: Any, strategy: Any = None) -> Any | None:
    """The variable the train step writes the gradients' ready time to (seconds since the
    epoch), set up once per optimizer; None when the optimizer is neither Horovod's nor a
    Keras optimizer under MultiWorkerMirroredStrategy (``strategy``: the model's, else the
    current one)."""
    if optimizer is None:
        return None
    try:
        known = _READY.get(optimizer)
    except TypeError:  # not weak-referenceable
        return None
    if known is not None:
        return known
    reduce: Any = getattr(optimizer, "_allreduce", None)
    aggregate: Any = getattr(optimizer, "aggregate_gradients", None)
    if not callable(reduce) and not (callable(aggregate) and _multiworker(strategy)):
        return None
    with tf.init_scope():
        ready = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="ringtrain_grads_ready")

    def stamp(grads: Any) -> None:
        tensors = [g.values if isinstance(g, tf.IndexedSlices) else g
                   for g in grads if g is not None]
        with tf.control_dependencies(tensors):
            ready.assign(tf.timestamp())

    if callable(reduce):
        def timed_allreduce(grads: Any, variables: Any) -> Any:
            stamp(grads)
            return reduce(grads, variables)

        optimizer._allreduce = timed_allreduce
    else:
        def timed_aggregate(grads_and_vars: Any) -> Any:
            grads_and_vars = list(grads_and_vars)
            stamp([g for g, _ in grads_and_vars])
            return aggregate(grads_and_vars)

        optimizer.aggregate_gradients = timed_aggregate
    _READY[optimizer] = ready
    return ready


def _multiworker(strategy: Any) -> bool:
    return isinstance(strategy or tf.distribute.get_strategy(),
                      tf.distribute.MultiWorkerMirroredStrategy)


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
        self._ready = gradients_ready_stamp(getattr(model, "optimizer", None),
                                            getattr(model, "distribute_strategy", None))

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
