# A training script written from TensorFlow's "Multi-worker training with Keras" tutorial, the
# way users of tf.distribute write theirs: the strategy reads TF_CONFIG (which ringtrain sets for
# every task under --strategy tf-multiworker), the model is built and compiled in its scope, the
# global batch is the per-worker batch times the workers, and Keras shards the dataset. MNIST is
# replaced by synthetic images (no download here). The lines marked "ringtrain" are the only
# additions: checkpoints to the launch's --checkpoint URL, resume after a restart, progress and
# step times for the launcher.
import json
import os
import sys

import numpy as np
import tensorflow as tf

import ringtrain.keras as rt  # ringtrain

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 6

per_worker_batch = 64
global_batch = per_worker_batch * strategy.num_replicas_in_sync
rng = np.random.default_rng(1234)
images = rng.random((2048, 14, 14, 1), dtype=np.float32)
labels = (images.reshape(2048, -1).sum(axis=1) > 98).astype(np.int64)
dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
           .shuffle(2048, seed=1).repeat().batch(global_batch))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(14, 14, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.001),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

initial_epoch = rt.resume(model)  # ringtrain
model.fit(dataset, epochs=epochs, steps_per_epoch=64, initial_epoch=initial_epoch, verbose=2,
          callbacks=rt.callbacks(batch_size=global_batch))  # ringtrain

# (test instrumentation: what the assertions read)
checksum = float(sum(float(tf.reduce_sum(tf.cast(w, tf.float64))) for w in model.weights))
print("RESULT " + json.dumps({"rank": task["index"], "checksum": checksum,
                              "steps": int(model.optimizer.iterations.numpy()),
                              "initial_epoch": initial_epoch}), flush=True)
