"""Rank program: synthetic-data training throughput, after Horovod's synthetic benchmark.

Like ``examples/tensorflow2/tensorflow2_synthetic_benchmark.py`` in Horovod: a Keras model
(``resnet50``, ``resnet101``, ``vgg16`` from ``tf.keras.applications`` with random weights, or
the ``digits`` CNN), one fixed random batch per rank, ``hvd.DistributedGradientTape`` inside
``tf.function``, ``--warmup`` untimed batches, then ``--iters`` timed groups of
``--batches`` batches; a rank's images/s per group is ``batch * batches / time``. Rank 0 prints
one ``RESULT {json}`` line: mean and spread over groups of the per-worker rate, averaged over
ranks, the step time, the device used and the model's parameter count.

The device is the GPU of this rank's local rank when TensorFlow sees GPUs, else the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

MODELS = ("resnet50", "resnet101", "vgg16", "digits")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="resnet50")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=2, help="untimed batches")
    p.add_argument("--batches", type=int, default=2, help="batches per timed group")
    p.add_argument("--iters", type=int, default=3, help="timed groups")
    return p.parse_args(argv)


def build(name: str, image_size: int) -> tuple[Any, tuple[int, ...], int]:
    import tensorflow as tf

    if name == "digits":
        from ringtrain.models.digits import build_model

        return build_model(), (8, 8, 1), 10
    shape = (image_size, image_size, 3)
    ctor = {"resnet50": tf.keras.applications.ResNet50,
            "resnet101": tf.keras.applications.ResNet101,
            "vgg16": tf.keras.applications.VGG16}[name]
    return ctor(weights=None, input_shape=shape, classes=1000), shape, 1000


def pick_device(hvd: Any) -> str:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "CPU"
    gpu = gpus[hvd.local_rank() % len(gpus)]
    tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpu, "GPU")
    return f"GPU {gpu.name}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    hvd.init()
    device = pick_device(hvd)
    model, shape, classes = build(args.model, args.image_size)
    opt = tf.keras.optimizers.SGD(0.01)
    data = tf.random.uniform((args.batch_size, *shape))
    target = tf.random.uniform((args.batch_size, 1), minval=0, maxval=classes, dtype=tf.int64)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=args.model == "digits")

    @tf.function
    def step(first: bool) -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)

    step(True)
    for _ in range(args.warmup):
        step(False)
    rates = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        for _ in range(args.batches):
            step(False)
        rates.append(args.batch_size * args.batches / (time.perf_counter() - t0))
    mean = float(hvd.allreduce(tf.constant(float(np.mean(rates))), op=hvd.Average).numpy())
    spread = float(np.std(rates) * 1.96)
    return {"model": args.model, "ranks": hvd.size(), "batch_size": args.batch_size,
            "image_size": args.image_size if args.model != "digits" else 8,
            "img_per_sec_per_worker": mean, "ci95_rank0": spread,
            "step_time_s": args.batch_size / mean, "device": device,
            "params": int(model.count_params()), "rank0_rates": [float(r) for r in rates]}


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = parse_args(argv)
    import horovod.tensorflow as hvd

    result = run(args)
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
