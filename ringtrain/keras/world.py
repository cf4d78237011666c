"""Who trains together, for ``ringtrain.keras``: Horovod's ranks, the workers of TensorFlow's
``MultiWorkerMirroredStrategy``, or the coordinator of its ``ParameterServerStrategy``.

``ringtrain.keras`` asks each the same four things: this process's rank (0 commits
checkpoints), how many train together, a Python object and the variables broadcast from rank 0.
Which world a script is in comes from ``TF_CONFIG`` (set by ``ringtrain launch --strategy
tf-*`` for every task, or by the user): a cluster with ``ps`` tasks is the parameter-server
strategy, any other is MultiWorkerMirrored; no ``TF_CONFIG`` is Horovod.

* Horovod: ``horovod.tensorflow`` itself.
* MultiWorkerMirrored: every worker runs the script. Rank = the worker's index (worker 0 is
  TensorFlow's chief). Broadcasts are sums over TensorFlow's own collectives in which every
  worker but 0 contributes zeros, so only worker 0 touches the checkpoint storage, as under
  Horovod. Every worker writes the checkpoint (TensorFlow's rule under this strategy: reading
  some variables is itself a collective); only worker 0 commits it.
* ParameterServer: only the coordinator (the ``chief`` task) runs the training loop; workers and
  ps tasks serve. It is rank 0 and the only rank that calls ringtrain.keras: its variables
  live on the ps tasks and it reads and writes them all. Its size is the number of workers.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from ringtrain.errors import UsageError

HOROVOD, MULTIWORKER, PS = "horovod", "tf-multiworker", "tf-ps"


def kind_from_env(environ: Any = os.environ) -> str:
    text = environ.get("TF_CONFIG")
    if not text:
        return HOROVOD
    try:
        cluster = json.loads(text).get("cluster", {})
    except (ValueError, AttributeError):
        raise UsageError("TF_CONFIG is not valid JSON",
                         "fix or unset TF_CONFIG (ringtrain launch --strategy sets it)") from None
    return PS if cluster.get("ps") else MULTIWORKER


def world(model: Any = None) -> Any:
    """The world of this process: ``horovod.tensorflow``, or an object answering the same
    calls (``rank``, ``size``, ``broadcast_object``, ``broadcast_variables``, plus
    ``all_write``: whether every rank writes a checkpoint rank 0 commits)."""
    kind = kind_from_env()
    if kind == PS:
        return Coordinator()
    if kind == MULTIWORKER:
        return Mirrored(getattr(model, "distribute_strategy", None))
    return _horovod()


class Coordinator:
    """ParameterServerStrategy's coordinator: the one process that runs the script's loop."""

    kind = PS
    all_write = False

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        """The workers that run the steps it dispatches (for samples/s: per-worker batches)."""
        cluster = json.loads(os.environ["TF_CONFIG"]).get("cluster", {})
        return max(len(cluster.get("worker", [])), 1)

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        return obj

    def broadcast_variables(self, variables: Any, root_rank: int = 0) -> None:
        return None


class Mirrored:
    """MultiWorkerMirroredStrategy's workers: rank and size from TF_CONFIG, broadcasts over the
    strategy's collectives (the model's strategy; needed only for broadcasts)."""

    kind = MULTIWORKER
    all_write = True

    def __init__(self, strategy: Any) -> None:
        config = json.loads(os.environ["TF_CONFIG"])
        task = config.get("task", {})
        cluster = config.get("cluster", {})
        self._size = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
        index = int(task.get("index", 0))
        self._rank = index + (len(cluster.get("chief", [])) if task.get("type") == "worker"
                              else 0)
        self.strategy = strategy

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _sum(self, tensors: list[Any]) -> list[Any]:
        """Every worker's ``tensors`` summed, back on every worker (a collective: every worker
        must call it, in the same order)."""
        strategy = self.strategy
        if strategy is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            raise UsageError(
                "ringtrain.keras: TF_CONFIG names a multi-worker cluster, but the model was not "
                "built in a MultiWorkerMirroredStrategy's scope",
                "build and compile the model inside `with strategy.scope():` before "
                "ringtrain.keras.resume(model)")

        def replica_fn() -> list[Any]:
            ctx = tf.distribute.get_replica_context()
            return [ctx.all_reduce(tf.distribute.ReduceOp.SUM, t) for t in tensors]

        # in a function: run eagerly, TF warns of its overhead on every call
        per_replica = tf.function(lambda: strategy.run(replica_fn))()
        return [strategy.experimental_local_results(t)[0] for t in per_replica]

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        mine = root_rank == self._rank
        data = json.dumps(obj).encode() if mine else b""
        (length,) = self._sum([tf.constant(len(data), tf.int64)])
        padded = data.ljust(int(length), b"\0") if mine else b"\0" * int(length)
        (summed,) = self._sum([tf.constant(list(padded), tf.int32)])
        return json.loads(bytes(int(b) for b in summed.numpy()).decode())

    def broadcast_variables(self, variables: Any, root_rank: int = 0) -> None:
        mine = root_rank == self._rank
        values = [v.read_value() if mine else tf.zeros_like(v.read_value()) for v in variables]
        for variable, value in zip(variables, self._sum(values), strict=True):
            variable.assign(value)


def _horovod() -> Any:
    try:
        import horovod.tensorflow as hvd  # noqa: PLC0415 - the train extra
    except ImportError as err:
        raise UsageError(
            "ringtrain.keras needs Horovod (or TF_CONFIG for a tf.distribute strategy)",
            "pip install 'ringtrain[train]'") from err
    if not hvd.is_initialized():
        raise UsageError(
            "ringtrain.keras was called before hvd.init()",
            "call hvd.init() first thing in the script, then ringtrain.keras.resume(model)",
        )
    return Horovod(hvd)


class Horovod:
    """Horovod's ranks (``horovod.tensorflow``, already initialised)."""

    kind = HOROVOD
    all_write = False

    def __init__(self, hvd: Any) -> None:
        self.hvd = hvd

    def rank(self) -> int:
        return int(self.hvd.rank())

    def size(self) -> int:
        return int(self.hvd.size())

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=root_rank, name=name)

    def broadcast_variables(self, variables: Any, root_rank: int = 0) -> None:
        self.hvd.broadcast_variables(variables, root_rank=root_rank)
