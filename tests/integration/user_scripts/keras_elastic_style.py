# A training script written from Horovod's elastic tf.keras example (examples/elastic/
# tensorflow2/tensorflow2_keras_mnist_elastic.py), unchanged in what matters: hvd.elastic's
# KerasState, its three callbacks, a reset callback that rescales the learning rate, and
# @hvd.elastic.run around model.fit. MNIST is replaced by synthetic images (no download here)
# and each batch sleeps a little, so a test can lose a rank mid-run.
import json
import sys
import time

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()

gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 12
batch_pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.15
rng = np.random.default_rng(1234)
images = rng.random((2048, 14, 14, 1), dtype=np.float32)
labels = (images.reshape(2048, -1).sum(axis=1) > 98).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(
    1000, seed=hvd.rank()).batch(32)

model = tf.keras.Sequential([
    tf.keras.layers.Input(shape=(14, 14, 1)),
    tf.keras.layers.Conv2D(8, [3, 3], activation='relu'),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(16, activation='relu'),
    tf.keras.layers.Dense(2, activation='softmax'),
])

# Horovod: adjust learning rate based on number of GPUs.
lr = 0.001
scaled_lr = lr * hvd.size()
opt = hvd.DistributedOptimizer(tf.optimizers.Adam(scaled_lr))
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt,
              metrics=['accuracy'], experimental_run_tf_function=False)


def on_state_reset():
    # Horovod: the world changed size: rescale the learning rate.
    tf.keras.backend.set_value(state.model.optimizer.lr, lr * hvd.size())
    print(f"RESET size={hvd.size()} epoch={state.epoch} batch={state.batch}", flush=True)


state = hvd.elastic.KerasState(model, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])


class Pace(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(batch_pause)

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            print(f"EPOCH {epoch + 1} size={hvd.size()}", flush=True)


callbacks = [
    # Horovod: elastic callbacks: commit every 4 batches, keep batch and epoch in the state.
    hvd.elastic.CommitStateCallback(state, batches_per_commit=4),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state),
    Pace(),
]


@hvd.elastic.run
def train(state):
    model.fit(dataset, steps_per_epoch=8, callbacks=callbacks, epochs=epochs - state.epoch,
              verbose=0)


train(state)
print("RESULT " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch}),
      flush=True)
