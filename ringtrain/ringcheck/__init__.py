"""The ring check: is the network between the chosen hosts healthy, and which host or link is not?

``schedule.py`` (PURE) pairs hosts round-robin; ``rankprog.py`` runs on the hosts under mpirun
(mpi4py): every pair's bandwidth and latency, round by round, then a ring all-reduce;
``outliers.py`` (PURE) names slow hosts and links by robust statistics; ``runner.py`` launches
the rank program through the ordinary launch Session and reads its result; ``picture.py`` draws
the pair matrix.
"""
