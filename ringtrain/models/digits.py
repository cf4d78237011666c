"""Train a small CNN on scikit-learn's 8x8 digits with Horovod ring all-reduce.

Run it through ringtrain (``ringtrain launch ringtrain/models/digits.py``) or any MPI launcher.
The data ships inside scikit-learn, so nothing is downloaded. What it shows:

* ``hvd.init()``, one shard of the training set per rank (``x[rank::size]``);
* ``hvd.DistributedOptimizer``: gradients averaged by ring all-reduce every step;
* learning rate scaled by the number of ranks, with a linear warm-up (Goyal et al. 2017);
* every rank starts from rank 0's weights and optimizer state (``hvd.broadcast_variables``
  before training: the resumed ones, or rank 0's initial ones; then
  ``BroadcastGlobalVariablesCallback(0)`` after the first step), and ``MetricAverageCallback``
  so logged metrics are averages over ranks;
* checkpoints and progress through the public API every script can use, ``ringtrain.keras``:
  ``resume(model)`` and ``callbacks(...)``. Rank 0 commits a ``tf.train.Checkpoint`` (weights,
  optimizer state, epoch, step) every epoch, atomically, to ``--checkpoint`` (a path, file://,
  s3:// or hdfs://; default $RINGTRAIN_CHECKPOINT_URL, else $RINGTRAIN_RUN_DIR/checkpoints). A
  new run on the same URL resumes from the newest checkpoint whose files verify;
* rank 0 writes TensorBoard logs to $RINGTRAIN_RUN_DIR/tensorboard (``ringtrain tensorboard RUN``);
* a final evaluation on the same held-out set on every rank, which must agree across ranks.

Lines meant for machines start with ``RESULT`` and carry JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ringtrain.rank import envvars

TEST_FRACTION = 0.2


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.001, help="base learning rate for one rank")
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--checkpoint",
        "--checkpoint-dir",
        dest="checkpoint",
        default=None,
        metavar="URL",
        help="where to commit and resume checkpoints: a path, file://, s3://, hdfs:// "
        "(default: $RINGTRAIN_CHECKPOINT_URL, else $RINGTRAIN_RUN_DIR/checkpoints)",
    )
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep (newest)")
    p.add_argument(
        "--tensorboard-dir",
        default=None,
        help="rank 0's TensorBoard logs (default: $RINGTRAIN_RUN_DIR/tensorboard when set)",
    )
    p.add_argument(
        "--fail-at-epoch",
        type=int,
        default=None,
        metavar="E",
        help="fault injection: --fail-rank exits with status 1 during 1-based epoch E, "
        "in a run that did not resume (so a relaunch gets past it)",
    )
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        help="exit with status 3 when the held-out accuracy ends below this",
    )
    return p.parse_args(argv)


def load_data(seed: int) -> tuple[Any, Any, Any, Any]:
    """Digits as float32 images in [0, 1], split once with a fixed permutation."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype("float32") / 16.0)[..., None]
    y = digits.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build_model() -> Any:
    import tensorflow as tf

    return tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(8, 8, 1)),
            tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )


def compile_model(scaled_lr: float, hvd: Any) -> tuple[Any, Any]:
    """The CNN with Adam wrapped in hvd.DistributedOptimizer (ring all-reduce of gradients)."""
    import tensorflow as tf

    model = build_model()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=scaled_lr))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model, optimizer


def tensorboard_dir(args: argparse.Namespace) -> Path | None:
    if args.tensorboard_dir:
        return Path(args.tensorboard_dir)
    run_dir = os.environ.get(envvars.RUN_DIR)
    return Path(run_dir) / "tensorboard" if run_dir else None


def fail_at_epoch(epoch: int, exit_here: bool = True) -> Any:
    """Fault injection, a Keras callback on every rank: the failing one (``exit_here``) exits
    with status 1 at batch 2 of the 1-based ``epoch``. By then rank 0 has committed epoch-1:
    it waits for that upload before batch 2's all-reduce, which needs every rank, so a
    relaunch resumes there."""
    import tensorflow as tf

    class FailAtEpoch(tf.keras.callbacks.Callback):  # type: ignore[misc]
        current = -1

        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            self.current = e + 1

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self.current == epoch and batch == 1:
                # rank 0's upload of the epoch before lands first (commits run in the
                # background); the others wait for rank 0 in this batch's all-reduce
                import ringtrain.keras as rt

                rt.wait_for_commits()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if exit_here and self.current == epoch and batch >= 1:
                print(f"fault injection: exiting at epoch {epoch}, batch {batch}", flush=True)
                os._exit(1)

    return FailAtEpoch()


def make_callbacks(args: argparse.Namespace, hvd: Any, resumed_epoch: int) -> list[Any]:
    import tensorflow as tf

    import ringtrain.keras as rt

    callbacks = [
        # Variables were broadcast from rank 0 before training (rt.resume); this also
        # re-syncs anything Keras creates lazily during the first step.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=args.lr * hvd.size(), warmup_epochs=args.warmup_epochs, verbose=0
        ),
    ]
    # rank 0: commit a checkpoint every epoch; epoch, step, loss and samples/s for the
    # launcher's live view and stall detection
    meta = {"model": "digits-cnn", "ranks": hvd.size(), "batch_size": args.batch_size}
    callbacks += rt.callbacks(batch_size=args.batch_size, url=args.checkpoint, keep=args.keep,
                              meta=meta)
    tb_dir = tensorboard_dir(args)
    if hvd.rank() == 0 and tb_dir is not None:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(tb_dir), profile_batch=0))
    if args.fail_at_epoch is not None and resumed_epoch == 0:
        callbacks.append(fail_at_epoch(args.fail_at_epoch,
                                       exit_here=hvd.rank() == args.fail_rank))
    return callbacks


def train(args: argparse.Namespace) -> dict[str, Any]:
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    import ringtrain.keras as rt

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tf.keras.utils.set_random_seed(args.seed + rank)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    model, optimizer = compile_model(args.lr * size, hvd)
    initial_epoch = rt.resume(model, url=args.checkpoint)
    callbacks = make_callbacks(args, hvd, initial_epoch)
    started = time.monotonic()
    history = model.fit(
        x_shard,
        y_shard,
        batch_size=args.batch_size,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks,
        verbose=2 if rank == 0 else 0,
        shuffle=True,
    )
    train_s = time.monotonic() - started
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    losses = history.history.get("loss") or [float("nan")]
    resumed = rt.resumed()
    return {
        "rank": rank,
        "size": size,
        "epochs": args.epochs,
        "steps": int(optimizer.iterations.numpy()),
        "train_loss": float(losses[-1]),
        "test_loss": float(np.float32(loss)),
        "test_accuracy": float(accuracy),
        "train_seconds": round(train_s, 3),
        "checkpoint": rt.checkpoint_url(args.checkpoint) if rank == 0 else None,
        "resumed_from": {"epoch": resumed.epoch, "step": resumed.step} if resumed else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = train(args)
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
    if result["rank"] == 0:
        print(
            f"held-out accuracy: {result['test_accuracy']:.4f} "
            f"(loss {result['test_loss']:.4f}, {result['size']} ranks, "
            f"{result['train_seconds']:.1f} s training)",
            flush=True,
        )
    if args.target_accuracy is not None and result["test_accuracy"] < args.target_accuracy:
        print(
            f"accuracy {result['test_accuracy']:.4f} is below the target "
            f"{args.target_accuracy:.4f}",
            file=sys.stderr,
            flush=True,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
