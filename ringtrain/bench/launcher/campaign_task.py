"""The fault campaign's task: the digits CNN (``ringtrain/models/digits.py``'s data and model:
scikit-learn's 8x8 digits, nothing downloaded), whose fault-free accuracy is stable (about
0.98-0.99 on the same 359 held-out images: 0.986 in the campaign), so a faulted run's
accuracy can be judged against the fault-free run's.
The recovery benchmark's toy task ended at chance (0.51).

The protocol is ``recovery.RECOVERY_SCRIPT``'s: arguments EPOCHS SPE PAUSE COMMIT STYLE (hvd:
Horovod's own ``hvd.elastic.run`` recipe, the anchor's; rt: the plain recipe with the three
``ringtrain.keras`` lines); rank 0 prints ``STEP <wall time> <global step> <world size>`` after
every batch and ``RESULT {"accuracy": ...}`` at the end.
"""

from ringtrain.bench.launcher.recovery import TRAINING_LOOP

CAMPAIGN_SCRIPT = """\
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow.keras as hvd
import tensorflow as tf

from ringtrain.models.digits import build_model, load_data

hvd.init()
EPOCHS, SPE, COMMIT = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
PAUSE, STYLE = float(sys.argv[3]), sys.argv[5]  # STYLE: hvd (hvd.elastic.run) or rt
tf.keras.utils.set_random_seed(42)  # the same initial weights on every rank, every run
x, y, x_test, y_test = load_data(42)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(
    2000, seed=hvd.rank()).batch(32)
model = build_model()
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"],
              optimizer=hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size())),
              experimental_run_tf_function=False)


""" + TRAINING_LOOP + """\
accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
if hvd.rank() == 0:
    print("RESULT " + json.dumps({"accuracy": accuracy, "size": hvd.size()}), flush=True)
"""
