# A training script written from Horovod's tf.keras example (examples/tensorflow2/
# tensorflow2_keras_mnist.py), the way users write theirs: module-level code, verbose=1
# progress bars on rank 0, Horovod's own callbacks. MNIST is replaced by synthetic images
# (no download here). The lines marked "ringtrain" are the only additions: checkpoints to
# the launch's --checkpoint URL, resume after a restart, progress for the launcher.
import json
import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import ringtrain.keras as rt  # ringtrain

# Horovod: initialize Horovod.
hvd.init()

# Horovod: pin GPU to be used to process local rank (one GPU per process)
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
rng = np.random.default_rng(1234)
images = rng.random((2048, 14, 14, 1), dtype=np.float32)
labels = (images.reshape(2048, -1).sum(axis=1) > 98).astype(np.int64)

dataset = tf.data.Dataset.from_tensor_slices((images, labels))
dataset = dataset.repeat().shuffle(1000, seed=hvd.rank()).batch(64)

mnist_model = tf.keras.Sequential([
    tf.keras.layers.Input(shape=(14, 14, 1)),
    tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(32, activation='relu'),
    tf.keras.layers.Dense(2, activation='softmax')
])

# Horovod: adjust learning rate based on number of GPUs.
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(
    opt, backward_passes_per_step=1, average_aggregated_gradients=True)

mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                    optimizer=opt,
                    metrics=['accuracy'],
                    experimental_run_tf_function=False)
initial_epoch = rt.resume(mnist_model)  # ringtrain

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    hvd.callbacks.MetricAverageCallback(),
    # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final
    # accuracy. Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during
    # the first three epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
]
callbacks += rt.callbacks(batch_size=64)  # ringtrain

# Horovod: write logs on worker 0.
verbose = 1 if hvd.rank() == 0 else 0

# Train the model.
# Horovod: adjust number of steps based on number of GPUs.
mnist_model.fit(dataset, steps_per_epoch=64 // hvd.size(), callbacks=callbacks, epochs=epochs,
                initial_epoch=initial_epoch, verbose=verbose)

# (test instrumentation: what the assertions read)
checksum = float(sum(float(tf.reduce_sum(tf.cast(w, tf.float64))) for w in mnist_model.weights))
steps = int(opt.iterations.numpy())
print("RESULT " + json.dumps({"rank": hvd.rank(), "checksum": checksum, "steps": steps,
                              "initial_epoch": initial_epoch}), flush=True)
