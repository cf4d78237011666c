"""Rank program of ``ringtrain bench train --strategy``: synthetic-data training steps of one
model under Horovod's ring, TensorFlow's MultiWorkerMirroredStrategy or its
ParameterServerStrategy, launched by ``ringtrain launch --strategy`` (which sets TF_CONFIG).

Models: ``dense`` (communication-bound: four 1024x1024 layers, 16.8 MB of parameters, little
compute per sample) and ``conv`` (compute-bound: three 3x3 convolutions over 32x32 images,
0.2 MB of parameters). One fixed random batch of ``--batch-size`` per worker. Every program
first times ``T1``, the same step on one process without any strategy (what the cost model
adds communication to), then ``--warmup`` untimed distributed steps, then ``--steps`` timed
ones, then the strategy's exchange of the parameter bytes alone (its all-reduce of
gradient-shaped tensors, or its pull of every variable and push of a gradient for each),
untimed and timed the same way. Rank 0 (Horovod), worker 0 (MultiWorkerMirrored) or the
chief (parameter servers; ps and worker tasks only serve) prints one ``RESULT {json}``
line: samples/s over all workers, the step time of one worker, T1, the exchange alone, the
parameter bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

MODELS = ("dense", "conv")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="dense")
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--warmup", type=int, default=5, help="untimed distributed steps")
    p.add_argument("--steps", type=int, default=20, help="timed steps (per worker)")
    return p.parse_args(argv)


def build(name: str) -> tuple[Any, tuple[int, ...]]:
    import tensorflow as tf

    if name == "dense":
        layers = [tf.keras.layers.Input(shape=(1024,))]
        layers += [tf.keras.layers.Dense(1024, activation="relu") for _ in range(4)]
        return tf.keras.Sequential([*layers, tf.keras.layers.Dense(10)]), (1024,)
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(32, 32, 3)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10),
    ]), (32, 32, 3)


def batch(shape: tuple[int, ...], size: int) -> tuple[Any, Any]:
    import tensorflow as tf

    return (tf.random.stateless_uniform((size, *shape), seed=(7, 1)),  # no variables: a
            tf.random.stateless_uniform((size,), seed=(7, 2), maxval=10,  # dataset_fn may
                                        dtype=tf.int64))  # create none


def loss_fn() -> Any:
    import tensorflow as tf

    return tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


_BUSY: dict[str, float] = {}  # what busy() measured, for the RESULT line
MIN_BUSY_S = 0.2  # 20 ticks of 10 ms per core at least


@contextlib.contextmanager
def busy(label: str) -> Iterator[None]:
    """The share of this host's cores busy (every process's, not only this one's) while the
    block ran, kept as ``label``: the simulated hosts share one machine's cores, so a step
    slower than T1 plus its exchange alone shows here whether the cores were the limit."""
    import psutil

    def used() -> float:
        t = psutil.cpu_times()
        return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))

    t0, b0 = time.perf_counter(), used()
    yield
    seconds = time.perf_counter() - t0
    if seconds >= MIN_BUSY_S:  # the kernel counts in ticks: a shorter block says nothing
        _BUSY[label] = (used() - b0) / (seconds * (psutil.cpu_count() or 1))


def _timed(step: Callable[[], Any], count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def t1(args: argparse.Namespace) -> tuple[float, int]:
    """One process's step with no strategy (median seconds), and the parameter bytes."""
    import tensorflow as tf

    model, shape = build(args.model)
    opt = tf.keras.optimizers.SGD(0.01)
    x, y = batch(shape, args.batch_size)
    loss = loss_fn()

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(loss(y, model(x, training=True)))
        opt.apply_gradients(zip(tape.gradient(value, model.trainable_variables),
                                model.trainable_variables, strict=True))
        return value

    _timed(lambda: step().numpy(), 3)
    return statistics.median(_timed(lambda: step().numpy(), 10)), int(model.count_params()) * 4


def horovod(args: argparse.Namespace) -> dict[str, Any] | None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    base, params = t1(args)
    model, shape = build(args.model)
    opt = tf.keras.optimizers.SGD(0.01)
    x, y = batch(shape, args.batch_size)
    loss = loss_fn()

    @tf.function
    def step(first: bool) -> Any:
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(loss(y, model(x, training=True)))
        tape = hvd.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(value, model.trainable_variables),
                                model.trainable_variables, strict=True))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
        return value

    step(True).numpy()
    _timed(lambda: step(False).numpy(), args.warmup)
    with busy("steps"):
        times = _timed(lambda: step(False).numpy(), args.steps)
    worst = float(hvd.allreduce(tf.constant(statistics.median(times)), op=hvd.Max).numpy())

    grads = [tf.ones_like(v) for v in model.trainable_variables]

    @tf.function
    def exchange(tensors: list[Any]) -> Any:  # what DistributedGradientTape does, alone
        return tf.add_n([tf.reduce_sum(hvd.allreduce(t, op=hvd.Average)) for t in tensors])

    alone = _exchange_alone(lambda: exchange(grads).numpy(), args)
    alone = float(hvd.allreduce(tf.constant(alone), op=hvd.Max).numpy())
    if hvd.rank() != 0:
        return None
    return _result(args, "horovod", hvd.size(), 0, worst, base, params, alone)


def multiworker(args: argparse.Namespace) -> dict[str, Any] | None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: TF's rule for this one
    base, params = t1(args)
    with strategy.scope():
        model, shape = build(args.model)
        opt = tf.keras.optimizers.SGD(0.01)
    x, y = batch(shape, args.batch_size)
    loss = loss_fn()
    workers = strategy.num_replicas_in_sync

    def replica() -> Any:
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(loss(y, model(x, training=True))) / (args.batch_size * workers)
        opt.apply_gradients(zip(tape.gradient(value, model.trainable_variables),
                                model.trainable_variables, strict=True))
        return value

    @tf.function
    def step() -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica), axis=None)

    _timed(lambda: step().numpy(), args.warmup + 1)
    with busy("steps"):
        times = _timed(lambda: step().numpy(), args.steps)
    grads = [tf.ones_like(v) for v in model.trainable_variables]

    def replica_exchange() -> Any:  # the all-reduce apply_gradients does, alone
        reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                 grads)
        return tf.add_n([tf.reduce_sum(t) for t in reduced])

    @tf.function
    def exchange() -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_exchange),
                               axis=None)

    alone = _exchange_alone(lambda: exchange().numpy(), args)
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    if task["index"] != 0:
        return None
    return _result(args, "tf-multiworker", workers, 0, statistics.median(times), base, params,
                   alone)


def parameter_servers(args: argparse.Namespace) -> dict[str, Any] | None:
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec().as_dict()
    if resolver.task_type in ("worker", "ps"):
        tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                             task_index=resolver.task_id, protocol="grpc", start=True).join()
    k, workers = len(cluster["ps"]), len(cluster["worker"])
    base, params = t1(args)
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=64 << 10, max_shards=k)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model, shape = build(args.model)
        opt = tf.keras.optimizers.SGD(0.01)
    loss = loss_fn()

    def dataset_fn() -> Any:
        x, y = batch(shape, args.batch_size)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def worker_fn(it: Any) -> Any:
        def replica(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(loss(y, model(x, training=True)))
            opt.apply_gradients(zip(tape.gradient(value, model.trainable_variables),
                                    model.trainable_variables, strict=True))
            return value

        x, y = next(it)
        return strategy.run(replica, args=(x, y))

    @tf.function
    def exchange_fn() -> Any:  # pull every variable, then push a gradient for each: no compute
        def replica() -> Any:
            variables = model.trainable_variables
            # As in a training step, no gradient is pushed before every variable is pulled
            # (the forward pass reads them all, the backward pass yields the gradients): the
            # gradients pushed are the values pulled, once all have arrived. Without that
            # ordering TF sends some while others still arrive, both ways on the link at once.
            pulled = [tf.identity(v) for v in variables]
            with tf.control_dependencies(pulled):
                grads = [tf.identity(p) for p in pulled]
            opt.apply_gradients(zip(grads, variables, strict=True))
            return tf.add_n([tf.reduce_sum(p) for p in pulled])

        return strategy.run(replica)

    def run(steps: int, fn: Any = None) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            if fn is None:
                coordinator.schedule(worker_fn, args=(iterator,))
            else:
                coordinator.schedule(fn)
        coordinator.join()
        return time.perf_counter() - t0

    run((args.warmup + 1) * workers)
    total = args.steps * workers  # every worker runs about --steps of them
    with busy("steps"):
        seconds = run(total)
    run(max(1, args.warmup // 2) * workers, exchange_fn)
    with busy("exchange"):
        alone = run(total, exchange_fn) * workers / total
    return _result(args, "tf-ps", workers, k, seconds * workers / total, base, params, alone)


def _exchange_alone(step: Callable[[], Any], args: argparse.Namespace) -> float:
    """Median seconds of the strategy's own exchange of the parameter bytes with no compute:
    what separates a wrong transport from compute and exchange not adding up."""
    _timed(step, max(1, args.warmup // 2))
    with busy("exchange"):
        return statistics.median(_timed(step, args.steps))


def _result(args: argparse.Namespace, strategy: str, workers: int, k: int, step_s: float,
            base: float, params: int, exchange_s: float) -> dict[str, Any]:
    return {"strategy": strategy, "model": args.model, "workers": workers, "k": k,
            "batch_size": args.batch_size, "step_s": step_s, "t1_s": base,
            "exchange_s": exchange_s, "cpu_busy": dict(_BUSY),
            "samples_per_s": workers * args.batch_size / step_s, "param_bytes": params}


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = parse_args(argv)
    config = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if not config:
        result = horovod(args)
    elif config.get("ps"):
        result = parameter_servers(args)
    else:
        result = multiworker(args)
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
