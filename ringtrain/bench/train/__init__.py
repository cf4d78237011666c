"""The training benchmarks (``ringtrain bench train``): synthetic-data training steps of a
Keras model.

``training.py`` runs ``train_throughput.py``'s ranks (after Horovod's synthetic benchmark) for
N = 1.. workers: images/s per worker and scaling efficiency. ``strategies.py``
(``--strategy``) runs ``train_strategy.py`` under Horovod's ring, TensorFlow's
MultiWorkerMirrored and its parameter servers, each cell a launch Session, and sets the
measured steps against the cost model's prediction (each cell also times its strategy's
exchange alone, and a prediction more than 15% off gets a measured cause).
"""
