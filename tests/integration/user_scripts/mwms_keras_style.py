# A training script written from TensorFlow's "Multi-worker training with Keras" tutorial, the
# way users of tf.distribute write theirs: the strategy reads TF_CONFIG (which ringtrain sets for
# every task under --strategy tf-multiworker), the model is built in its scope, the global batch
# is the per-worker batch times the number of workers, and Keras shards the dataset. MNIST is
# replaced by scikit-learn's 8x8 digits (no download here). Nothing in it is ringtrain's.
import json
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
workers = strategy.num_replicas_in_sync
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 8

digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[..., None]
labels = digits.target.astype(np.int64)
order = np.random.default_rng(0).permutation(len(labels))
train, test = order[:1500], order[1500:]

per_worker_batch = 32
global_batch = per_worker_batch * workers
dataset = (tf.data.Dataset.from_tensor_slices((images[train], labels[train]))
           .shuffle(1500, seed=1).repeat().batch(global_batch))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.003),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

model.fit(dataset, epochs=epochs, steps_per_epoch=1500 // global_batch, verbose=2)
_, accuracy = model.evaluate(images[test], labels[test], verbose=0)
weights = float(sum(np.abs(w).sum() for w in model.get_weights()))
print("RESULT " + json.dumps({"task": task, "workers": workers, "accuracy": float(accuracy),
                              "weights": round(weights, 3)}), flush=True)
