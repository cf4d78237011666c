"""The digits CNN of ``digits.py`` under TensorFlow's own strategies instead of Horovod:

    ringtrain launch --strategy tf-multiworker --hosts gpu.txt ringtrain/models/digits_tf.py
    ringtrain launch --strategy tf-ps --ps 2 --hosts gpu.txt ringtrain/models/digits_tf.py

Which strategy comes from ``TF_CONFIG`` (ringtrain sets it for every task): a cluster with ps
tasks is ``ParameterServerStrategy`` (ps and worker tasks serve, the chief trains), any other
``MultiWorkerMirroredStrategy`` (every worker trains; gradients are all-reduced by TensorFlow's
collectives). The same data, model, options and ``RESULT`` line as ``digits.py``, and the same
public API for checkpoints, resume and progress (``ringtrain.keras``): rank 0 (worker 0, or
the chief) commits a checkpoint every epoch; a restarted job resumes from the newest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ringtrain.models.digits import build_model, fail_at_epoch, load_data, parse_args


def serve_forever(resolver: Any) -> None:
    """ps and worker tasks of a parameter-server cluster: serve until the launcher ends the
    job (``ringtrain launch`` does once the chief is done)."""
    import tensorflow as tf

    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    server.join()


def _fail_at_epoch_begin(epoch: int) -> Any:
    """Fault injection for the coordinator (ParameterServerStrategy takes no batch-level
    callbacks): exit with status 1 as the 1-based ``epoch`` begins, the one before committed."""
    import tensorflow as tf

    class FailAtEpochBegin(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            if e + 1 == epoch:
                import ringtrain.keras as rt

                rt.wait_for_commits()  # the epoch before, uploaded in the background, lands
                print(f"fault injection: exiting at epoch {epoch}, batch 0", flush=True)
                os._exit(1)

    return FailAtEpochBegin()


def _strategy(kind: str, resolver: Any) -> tuple[Any, int]:
    import tensorflow as tf

    if kind == "tf-ps":
        ps = len(resolver.cluster_spec().as_dict().get("ps", []))
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=64 << 10, max_shards=ps)
        strategy = tf.distribute.ParameterServerStrategy(resolver,
                                                         variable_partitioner=partitioner)
        return strategy, len(resolver.cluster_spec().as_dict().get("worker", []))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    return strategy, strategy.num_replicas_in_sync


def train(args: argparse.Namespace) -> dict[str, Any] | None:
    import numpy as np
    import tensorflow as tf

    import ringtrain.keras as rt
    from ringtrain.keras import world as keras_world

    kind = keras_world.kind_from_env()
    if kind == keras_world.HOROVOD:
        sys.exit("digits_tf.py runs under a TensorFlow strategy: launch it with --strategy "
                 "tf-multiworker or --strategy tf-ps --ps N (digits.py is the Horovod version)")
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if kind == keras_world.PS and resolver.task_type in ("worker", "ps"):
        serve_forever(resolver)
    strategy, workers = _strategy(kind, resolver)
    world = keras_world.world()
    rank = world.rank()
    tf.keras.utils.set_random_seed(args.seed)  # the same initial weights on every worker
    x_train, y_train, x_test, y_test = load_data(args.seed)
    global_batch = args.batch_size * workers
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=args.lr * workers),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    initial_epoch = rt.resume(model, url=args.checkpoint)
    meta = {"model": "digits-cnn", "strategy": kind, "workers": workers,
            "batch_size": args.batch_size}
    callbacks = rt.callbacks(batch_size=args.batch_size, url=args.checkpoint, keep=args.keep,
                             meta=meta)
    if args.fail_at_epoch is not None and initial_epoch == 0 and rank == args.fail_rank:
        callbacks.append(fail_at_epoch(args.fail_at_epoch) if kind == keras_world.MULTIWORKER
                         else _fail_at_epoch_begin(args.fail_at_epoch))

    def dataset(context: Any = None) -> Any:
        batch = context.get_per_replica_batch_size(global_batch) if context else global_batch
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        if context is not None:
            ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.shuffle(len(x_train), seed=args.seed).repeat().batch(batch).prefetch(2)

    data = (tf.keras.utils.experimental.DatasetCreator(dataset) if kind == keras_world.PS
            else dataset())
    started = time.monotonic()
    history = model.fit(data, epochs=args.epochs, initial_epoch=initial_epoch,
                        steps_per_epoch=max(len(x_train) // global_batch, 1),
                        callbacks=callbacks, verbose=2 if rank == 0 else 0)
    train_s = time.monotonic() - started
    logits = model.predict(x_test, batch_size=256, verbose=0)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y_test, logits)
    accuracy = float((np.argmax(logits, axis=1) == y_test).mean())
    losses = history.history.get("loss") or [float("nan")]
    resumed = rt.resumed()
    return {
        "rank": rank, "size": workers, "strategy": kind, "epochs": args.epochs,
        "steps": int(model.optimizer.iterations.numpy()), "train_loss": float(losses[-1]),
        "test_loss": float(loss), "test_accuracy": accuracy, "train_seconds": round(train_s, 3),
        "checkpoint": rt.checkpoint_url(args.checkpoint) if rank == 0 else None,
        "resumed_from": {"epoch": resumed.epoch, "step": resumed.step} if resumed else None,
    }


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parse_args(argv)
    result = train(args)
    if result is None:
        return 0
    print("RESULT " + json.dumps(result), flush=True)
    if args.target_accuracy is not None and result["test_accuracy"] < args.target_accuracy:
        print(f"accuracy {result['test_accuracy']:.3f} below --target-accuracy "
              f"{args.target_accuracy}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
