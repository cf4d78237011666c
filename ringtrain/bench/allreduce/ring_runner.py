"""Rank program: time all-reduce of float32 buffers through mpi4py or Horovod (MPI or Gloo).

Runs under mpirun, one process per rank
(``python -m mpi4py -m ringtrain.bench.allreduce.ring_runner``). For every size: untimed
all-reduces (the first one is checked for the right sum) until the times settle, ``--warmup``
at least (``settle.py``; their count and cost are in the result), then ``--reps`` timed ones,
each preceded by ``MPI_Barrier``; a rank's time is the wall time of its own all-reduce and the
iteration's time is the max over ranks (``MPI_Allreduce(MAX)``). Rank 0 prints one
``RESULT {json}`` line per size with every iteration's time.

Implementations (``--impl``):

* ``mpi4py``: ``comm.Allreduce`` on preallocated numpy buffers (the raw MPI baseline);
* ``mpi4py-ring``: the textbook ring written out in mpi4py (``ringcheck.rankprog.ring_op``, the
  ring check's own): N-1 reduce-scatter steps and N-1 all-gather steps, each a nonblocking
  ``Isend`` to the right neighbour and ``Irecv`` from the left (so both directions of a link
  move at once, as the cost model assumes), numpy sums;
* ``horovod``: ``hvd.allreduce(x, op=hvd.Sum)`` on a TF tensor inside ``tf.function``;
* ``horovod-eager``: the same call eagerly (what a naive script does);
* ``mpi4py-hvd-idle``: mpi4py's all-reduce in a process where Horovod is initialised and idle
  (its background thread cycles, negotiating over MPI: this measures the interference);
* ``p2p``: ranks 0 and 1 ping-pong the buffer (``Send``/``Recv``); a time is half the round
  trip (the raw MPI point-to-point ceiling, bytes/time = one-way bandwidth);
* ``gloo``: as ``horovod`` but over Horovod's Gloo controller and Gloo ring (the launcher serves
  the Gloo rendezvous, see gloo_rdzv.py).

``--tf-threads N`` caps TF's intra/inter-op pools (0 leaves TF's defaults); ``--average`` uses
Horovod's default ``op=Average`` (an extra scaling pass) instead of Sum.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ringtrain.bench.allreduce import settle
from ringtrain.ringcheck.rankprog import ring_op

IMPLS = ("mpi4py", "mpi4py-ring", "horovod", "horovod-eager", "gloo", "p2p", "mpi4py-hvd-idle")
HOROVOD_OPS = ("horovod", "horovod-eager", "gloo")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", required=True,
                   help=f"comma-separated, timed interleaved: {', '.join(IMPLS)}")
    p.add_argument("--sizes", required=True, help="comma-separated buffer sizes in bytes")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed iterations at least; more until the times settle (settle.py)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--tf-threads", type=int, default=0)
    p.add_argument("--average", action="store_true")
    return p.parse_args(argv)


def mpi4py_op(nbytes: int) -> tuple[Callable[[], None], Callable[[], Any]]:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    send = np.ones(nbytes // 4, dtype=np.float32)
    recv = np.empty_like(send)

    def run() -> None:
        comm.Allreduce(send, recv, op=MPI.SUM)

    return run, lambda: recv


def p2p_op(nbytes: int) -> tuple[Callable[[], None], Callable[[], Any]]:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    buf = np.full(nbytes // 4, float(comm.Get_size()), dtype=np.float32)

    def run() -> None:
        if rank == 0:
            comm.Send(buf, dest=1, tag=7)
            comm.Recv(buf, source=1, tag=7)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=7)
            comm.Send(buf, dest=0, tag=7)

    return run, lambda: buf


def horovod_op(nbytes: int, *, eager: bool, average: bool) -> tuple[
        Callable[[], None], Callable[[], Any]]:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    x = tf.ones([nbytes // 4], dtype=tf.float32)
    op = hvd.Average if average else hvd.Sum
    holder: dict[str, Any] = {}

    def reduce(t: Any) -> Any:
        return hvd.allreduce(t, op=op, name=f"bench_{nbytes}")

    fn = reduce if eager else tf.function(reduce)

    def run() -> None:
        holder["out"] = fn(x)

    def result() -> Any:
        return holder["out"].numpy()

    return run, result


def make_op(args: argparse.Namespace, impl: str, nbytes: int
            ) -> tuple[Callable[[], None], Callable[[], Any]]:
    if impl in ("mpi4py", "mpi4py-hvd-idle"):
        return mpi4py_op(nbytes)
    if impl == "p2p":
        return p2p_op(nbytes)
    if impl == "mpi4py-ring":
        return ring_op(nbytes)
    return horovod_op(nbytes, eager=impl == "horovod-eager", average=args.average)


def check_sum(result: Any, size: int, average: bool) -> None:
    import numpy as np

    want = 1.0 if average else float(size)
    arr = np.asarray(result)
    if arr.size and not (np.all(arr[:: max(1, arr.size // 1024)] == want) and arr[-1] == want):
        raise SystemExit(f"all-reduce gave {arr[:4]}..., expected {want}")


def time_size(args: argparse.Namespace, impls: list[str], nbytes: int) -> list[dict[str, Any]]:
    """Time every implementation on the same ranks, interleaved iteration by iteration (so a
    burst of load elsewhere on the machine hits all of them alike)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ops = {impl: make_op(args, impl, nbytes) for impl in impls}
    warmups: dict[str, list[float]] = {}
    for impl, (run, result) in ops.items():
        times = warmups[impl] = []
        while not settle.settled(times, minimum=args.warmup):
            comm.Barrier()
            t0 = time.perf_counter()
            run()
            # the slowest rank's time, so that every rank decides to stop at the same point
            times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            if len(times) == 1 and impl != "p2p":
                check_sum(result(), comm.Get_size(), args.average and impl in HOROVOD_OPS)
    local = np.empty((len(impls), args.reps), dtype=np.float64)
    for i in range(args.reps):
        for j, impl in enumerate(impls):
            run = ops[impl][0]
            comm.Barrier()
            t0 = time.perf_counter()
            run()
            local[j, i] = time.perf_counter() - t0
    for j, impl in enumerate(impls):
        if impl == "p2p":
            local[j] /= 2.0  # one way
    worst = np.empty_like(local)
    comm.Allreduce(local, worst, op=MPI.MAX)
    return [{"impl": impl, "bytes": nbytes, "ranks": comm.Get_size(),
             "times": [float(t) for t in worst[j]],
             "warmup": settle.summary(warmups[impl])} for j, impl in enumerate(impls)]


def init(args: argparse.Namespace, impls: list[str]) -> dict[str, Any]:
    from mpi4py import MPI

    info: dict[str, Any] = {"mpi": MPI.Get_library_version().splitlines()[0],
                            "thread_level": MPI.Query_thread()}
    if set(impls) <= {"mpi4py", "mpi4py-ring", "p2p"}:
        return info
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ.get("HOROVOD_CONTROLLER") == "gloo":  # Horovod reads these in hvd.init()
        from ringtrain.bench.allreduce.gloo_rdzv import rank_env_from_ompi

        os.environ.update(rank_env_from_ompi(os.environ))
    import horovod.tensorflow as hvd
    import tensorflow as tf

    if args.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    hvd.init()
    info.update(horovod_mpi=bool(hvd.mpi_enabled()), horovod_gloo=bool(hvd.gloo_enabled()),
                cpu_ops=os.environ.get("HOROVOD_CPU_OPERATIONS", "mpi"),
                tf_threads=args.tf_threads)
    return info


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    impls = args.impl.split(",")
    unknown = set(impls) - set(IMPLS)
    if unknown or ("gloo" in impls and len(impls) > 1):
        raise SystemExit(f"--impl {args.impl}: choose from {IMPLS}; gloo runs alone")
    from mpi4py import MPI

    info = init(args, impls)
    rank = MPI.COMM_WORLD.Get_rank()
    for nbytes in (int(s) for s in args.sizes.split(",")):
        for row in time_size(args, impls, nbytes):
            if rank == 0:
                print("RESULT " + json.dumps({**row, "info": info}), flush=True)
    if "cpu_ops" in info:  # shut Horovod's background thread down before MPI_Finalize
        import horovod.tensorflow as hvd

        MPI.COMM_WORLD.Barrier()
        hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
