"""The cost model of ring all-reduce and parameter-server exchange, and what is derived from it.

``costmodel.py`` (pure: the model, fitted by least squares), ``analysis.py`` (pure: a run's
fits, model ratios, crossovers and targets; ``ringtrain bench model``), ``projection.py``
(pure: a published setup's scaling efficiency from a fit) and ``projection_report.py``
(``ringtrain bench project --run``: that fit and measured step times); the projection from
public inputs alone: ``gpu_projection.py`` (pure: hierarchical all-reduce, Horovod's cycle and
fusion overlapped with the backward pass by layer order, the PS alternative, sensitivity),
``public_inputs.py`` (pure: every input with its source), ``layer_costs.py`` (pure data,
written by ``layer_costs_gen.py`` from tf.keras.applications), ``gpu_report.py`` (pure: the
tables and JSON of ``ringtrain bench project``) and ``projection_plot.py`` (its PNG).
"""
