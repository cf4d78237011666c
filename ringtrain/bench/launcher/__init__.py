"""Benchmarks of the launcher itself: its own costs and how fast it notices and cleans up.

``scale.py`` (one command, 1 to 1,000 simulated hosts: probe and teardown over the SSH farm,
``control_scale.py``'s simulated ranks against the control server and supervision,
``plan_scale.py``'s inventory parse, allocation and plan; docs/SCALE.md), ``probe_scaling.py``
(pre-flight vs horovodrun's SSH check), ``launch_overhead.py`` (``ringtrain launch`` vs a bare
mpirun), ``faults.py`` (fault to every host clean, on a simulated cluster) and
``ringcheck_scaling.py`` (``check --ring``'s wall time vs host count, and whether it names the
slow host).
"""
