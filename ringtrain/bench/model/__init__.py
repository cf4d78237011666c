"""The cost model of ring all-reduce and parameter-server exchange, and what is derived from it.

``costmodel.py`` (pure: the model, fitted by least squares), ``analysis.py`` (pure: a run's
fits, model ratios, crossovers and targets; ``ringtrain bench model``), ``projection.py``
(pure: a published setup's scaling efficiency from a fit) and ``projection_report.py``
(``ringtrain bench project``).
"""
