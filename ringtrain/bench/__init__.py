"""Benchmarks: ``ringtrain bench ...``, ``ringtrain ckpt bench`` and ``python -m`` programs.

One sub-package per family: ``model/`` (the cost model of ring and parameter-server exchange,
its fits and projections), ``allreduce/`` (the all-reduce and PS benchmark: rank programs,
harness, reports, the Horovod tuning ladder), ``train/`` (training-step benchmarks, Horovod
scaling and TF strategies) and ``launcher/`` (the launcher's own costs, at up to 1,000 hosts).
At the top, what is not one family's: ``units.py`` (the CLI's sizes and lists), ``monitor.py``
(CPU used by others during a round), ``figures.py`` (matplotlib helpers) and
``checkpoint_io.py`` (the checkpoint commit and restore benchmark).
"""
