"""The all-reduce benchmark (``ringtrain bench allreduce/ps/compare/report/tune``): ring and
parameter-server exchanges timed over mpi4py, Horovod (MPI or Gloo) and gRPC.

Rank programs run under mpirun: ``ring_runner.py`` (every ring implementation, warm-up until
steady by ``settle.py``; Gloo's rendezvous in ``gloo_rdzv.py``) and ``ps_runner.py`` (over
``ps_grpc.py``'s service). ``harness.py`` starts them round by round between the ceilings of
``ceilings.py``; ``suite.py`` says which jobs run where; ``benchrun.py`` runs a whole benchmark
and ``report.py`` (with ``plots.py``) writes its outputs; ``rdma.py`` looks for RDMA;
``tuning.py`` is the Horovod tuning ladder.
"""
