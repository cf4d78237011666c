# A training script written from TensorFlow's "Parameter server training with
# ParameterServerStrategy" tutorial (the Keras model.fit path), the way users of tf.distribute
# write theirs: ps and worker tasks start a tf.distribute.Server and join it; the chief (the
# coordinator) builds the strategy from TF_CONFIG, the model in its scope, and trains with
# model.fit over a DatasetCreator. ringtrain sets TF_CONFIG for every task under
# --strategy tf-ps and ends the servers when the chief's script returns. MNIST is replaced by
# scikit-learn's 8x8 digits (no download here). Nothing in it is ringtrain's.
import json
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

os.environ["GRPC_FAIL_FAST"] = "use_caller"
cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()

if cluster_resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=cluster_resolver.task_type,
        task_index=cluster_resolver.task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        start=True)
    server.join()

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
num_ps = len(cluster_resolver.cluster_spec().as_dict().get("ps", []))
strategy = tf.distribute.ParameterServerStrategy(
    cluster_resolver,
    variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(4 << 10), max_shards=num_ps))

digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[..., None]
labels = digits.target.astype(np.int64)
order = np.random.default_rng(0).permutation(len(labels))
train, test = order[:1500], order[1500:]
global_batch = 64


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch)
    ds = tf.data.Dataset.from_tensor_slices((images[train], labels[train])).repeat()
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(1500, seed=1).batch(batch).prefetch(2)


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
                  metrics=["accuracy"], steps_per_execution=5)

model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=epochs,
          steps_per_epoch=1500 // global_batch, verbose=2)
logits = model.predict(images[test], verbose=0)
accuracy = float((logits.argmax(axis=1) == labels[test]).mean())
devices = sorted({v.device for v in model.variables})
print("RESULT " + json.dumps({"task": {"type": cluster_resolver.task_type,
                                       "index": cluster_resolver.task_id},
                              "ps": num_ps, "accuracy": accuracy, "devices": devices}),
      flush=True)
