# A custom training loop in the style of Horovod's tensorflow2_mnist.py example
# (tf.GradientTape + hvd.DistributedGradientTape), synthetic data instead of MNIST. The lines
# marked "ringtrain" are the only additions (rt.batches: only --elastic needs it).
import json
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

import ringtrain.keras as rt  # ringtrain

hvd.init()

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
rng = np.random.default_rng(99)
images = rng.random((1024, 10), dtype=np.float32)
labels = (images.sum(axis=1) > 5).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).shard(hvd.size(), hvd.rank())
dataset = dataset.batch(32)

model = tf.keras.Sequential([
    tf.keras.layers.Input(shape=(10,)),
    tf.keras.layers.Dense(16, activation='relu'),
    tf.keras.layers.Dense(2),
])
loss_fn = tf.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = tf.optimizers.Adam(0.001 * hvd.size())


@tf.function
def training_step(x, y, first_batch):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    # Horovod: add Horovod Distributed GradientTape.
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
    return loss_value


start = rt.resume(model, opt)  # ringtrain
first = True
for epoch in range(start, epochs):
    for x, y in rt.batches(dataset, epoch):  # ringtrain (under --elastic; else the dataset)
        loss_value = training_step(x, y, first)
        first = False
    if hvd.rank() == 0:
        print(f"epoch {epoch + 1}: loss {float(loss_value):.4f}", flush=True)
    rt.save(model, opt, epoch=epoch + 1, loss=float(loss_value))  # ringtrain

checksum = float(sum(float(tf.reduce_sum(tf.cast(w, tf.float64))) for w in model.weights))
print("RESULT " + json.dumps({"rank": hvd.rank(), "checksum": checksum, "start": start,
                              "steps": int(opt.iterations.numpy())}), flush=True)
