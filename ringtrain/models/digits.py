"""Train a small CNN on scikit-learn's 8x8 digits with Horovod ring all-reduce.

Run it through ringtrain (``ringtrain launch ringtrain/models/digits.py``) or any MPI launcher.
The data ships inside scikit-learn, so nothing is downloaded. What it shows:

* ``hvd.init()``, one shard of the training set per rank (``x[rank::size]``);
* ``hvd.DistributedOptimizer``: gradients averaged by ring all-reduce every step;
* learning rate scaled by the number of ranks, with a linear warm-up (Goyal et al. 2017);
* ``BroadcastGlobalVariablesCallback(0)`` so every rank starts from rank 0's weights, and
  ``MetricAverageCallback`` so logged metrics are averages over ranks;
* rank 0 writes a ``tf.train.Checkpoint`` (weights + optimizer state) every epoch: the Keras
  ``.keras`` format cannot reload a Horovod-wrapped optimizer (STACK.md);
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

TEST_FRACTION = 0.2


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.001, help="base learning rate for one rank")
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--checkpoint-dir", default=None, help="default: $RINGTRAIN_RUN_DIR/checkpoints")
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


def checkpoint_dir(args: argparse.Namespace) -> Path:
    if args.checkpoint_dir:
        return Path(args.checkpoint_dir)
    return Path(os.environ.get("RINGTRAIN_RUN_DIR", ".")) / "checkpoints"


def make_checkpoint_callback(model: Any, optimizer: Any, directory: Path) -> Any:
    """Rank 0 only: save weights and optimizer state at the end of every epoch."""
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=tf.Variable(0))
    manager = tf.train.CheckpointManager(ckpt, str(directory), max_to_keep=3)

    class SaveEveryEpoch(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            ckpt.epoch.assign(epoch + 1)
            manager.save(checkpoint_number=epoch + 1)

    return SaveEveryEpoch()


def train(args: argparse.Namespace) -> dict[str, Any]:
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tf.keras.utils.set_random_seed(args.seed + rank)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    model = build_model()
    scaled_lr = args.lr * size
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=scaled_lr))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs, verbose=0
        ),
    ]
    ckpt_dir = checkpoint_dir(args)
    if rank == 0:
        callbacks.append(make_checkpoint_callback(model, optimizer, ckpt_dir))
    started = time.monotonic()
    history = model.fit(
        x_shard,
        y_shard,
        batch_size=args.batch_size,
        epochs=args.epochs,
        callbacks=callbacks,
        verbose=2 if rank == 0 else 0,
        shuffle=True,
    )
    train_s = time.monotonic() - started
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    return {
        "rank": rank,
        "size": size,
        "epochs": args.epochs,
        "train_loss": float(history.history["loss"][-1]),
        "test_loss": float(np.float32(loss)),
        "test_accuracy": float(accuracy),
        "train_seconds": round(train_s, 3),
        "checkpoint_dir": str(ckpt_dir) if rank == 0 else None,
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
