"""What an attempt runs, decided before anything starts: PURE values and functions.

``make`` (LaunchPlan, make_plan), one builder per launcher (``launchers``: mpirun, horovodrun,
srun), Open MPI's MCA pairs (``mca``), which variables are secrets (``secretvars``), the
TF_CONFIG cluster of a parameter-server job (``tfcluster``), the launcher machine's facts
(``sessionenv``).
"""
