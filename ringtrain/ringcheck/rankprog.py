"""Rank program of the ring check: one rank per host, under mpirun (``-m
ringtrain.ringcheck.rankprog``, through the ordinary rank entry and supervision).

Round by round (``schedule.rounds``: N-1 rounds of disjoint pairs, all pairs of a round at
once; a second pass in reverse order, the best of both kept), each pair measures its latency
(median of small ping-pongs, halved) and its bandwidth (both ends ``Sendrecv`` a buffer at the
same time: full duplex, as a ring uses each link; the best of up to ``--reps``, fewer when one
takes over a second on a slow link). Then the textbook ring all-reduce (``ring_op``; bench's
``mpi4py-ring`` times it too) of ``--ring-size`` bytes over all ranks gives the bus bandwidth
of the whole set. Rank 0 prints one ``RINGCHECK-PAIR {json}`` line per pair, then
``RINGCHECK {json}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

SLOW_REP_S = 1.0


def _pair(comm: Any, rank: int, peer: int, size: int, reps: int, lat_reps: int) -> dict[str, Any]:
    import numpy as np  # noqa: PLC0415 - rank side only

    small = np.zeros(2, dtype=np.float32)
    lat = []
    for _ in range(lat_reps):
        t0 = time.perf_counter()
        if rank < peer:
            comm.Send(small, dest=peer, tag=21)
            comm.Recv(small, source=peer, tag=21)
        else:
            comm.Recv(small, source=peer, tag=21)
            comm.Send(small, dest=peer, tag=21)
        lat.append(time.perf_counter() - t0)
    send = np.ones(size // 4, dtype=np.float32)
    recv = np.empty_like(send)
    flag = np.zeros(1, dtype=np.int32)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        comm.Sendrecv(send, dest=peer, sendtag=22, recvbuf=recv, source=peer, recvtag=22)
        elapsed = time.perf_counter() - t0
        best = min(best, elapsed)
        # the lower rank decides whether another rep fits, so both ends agree
        if rank < peer:
            flag[0] = int(elapsed < SLOW_REP_S)
            comm.Send(flag, dest=peer, tag=23)
        else:
            comm.Recv(flag, source=peer, tag=23)
        if not flag[0]:
            break
    return {"a": min(rank, peer), "b": max(rank, peer), "bandwidth_Bps": size / best,
            "latency_s": statistics.median(lat) / 2}


def ring_op(nbytes: int) -> tuple[Callable[[], None], Callable[[], Any]]:
    """The textbook ring all-reduce of ``nbytes`` of float32 ones over COMM_WORLD: N-1
    reduce-scatter steps and N-1 all-gather steps, each a nonblocking ``Isend`` to the right
    neighbour and ``Irecv`` from the left, numpy sums. Returns (run, result)."""
    import numpy as np  # noqa: PLC0415 - rank side only
    from mpi4py import MPI  # noqa: PLC0415 - rank side only

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    send = np.ones(nbytes // 4, dtype=np.float32)
    out = np.empty_like(send)
    bounds = [int(b) for b in np.linspace(0, send.size, size + 1)]
    blocks = [slice(a, b) for a, b in itertools.pairwise(bounds)]
    tmp = np.empty(max(b.stop - b.start for b in blocks), dtype=np.float32)

    def exchange(send_block: slice, recv_into: Any) -> None:
        reqs = [comm.Irecv(recv_into, source=left, tag=11),
                comm.Isend(out[send_block], dest=right, tag=11)]
        MPI.Request.Waitall(reqs)

    def run() -> None:
        np.copyto(out, send)
        for step in range(size - 1):  # reduce-scatter
            mine, theirs = blocks[(rank - step) % size], blocks[(rank - step - 1) % size]
            view = tmp[: theirs.stop - theirs.start]
            exchange(mine, view)
            np.add(out[theirs], view, out=out[theirs])
        for step in range(size - 1):  # all-gather
            mine, theirs = blocks[(rank + 1 - step) % size], blocks[(rank - step) % size]
            exchange(mine, out[theirs])

    return run, lambda: out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ringtrain.ringcheck.rankprog")
    parser.add_argument("--size", type=int, default=4 << 20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--lat-reps", type=int, default=20)
    parser.add_argument("--ring-size", type=int, default=16 << 20)
    parser.add_argument("--passes", type=int, choices=(1, 2), default=2)
    args = parser.parse_args(argv)
    from mpi4py import MPI  # noqa: PLC0415 - rank side only

    from ringtrain.ringcheck.schedule import rounds  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    started = time.perf_counter()
    best: dict[int, dict[str, Any]] = {}
    schedule = rounds(n)
    # two passes, the second in reverse order: a pair that met a disturbance in its round
    # (another job, the host's own work) gets a second chance in other company; best kept
    for order in (schedule, schedule[::-1])[: args.passes]:
        for pairs in order:
            comm.Barrier()
            peer = next((b if a == rank else a for a, b in pairs if rank in (a, b)), None)
            if peer is None:
                continue
            result = _pair(comm, rank, peer, args.size, args.reps, args.lat_reps)
            seen = best.get(peer)
            if seen is None or result["bandwidth_Bps"] > seen["bandwidth_Bps"]:
                if seen is not None:
                    result["latency_s"] = min(result["latency_s"], seen["latency_s"])
                best[peer] = result
    mine = [r for peer, r in sorted(best.items()) if rank < peer]
    pair_s = time.perf_counter() - started
    gathered = comm.gather(mine, root=0)
    ring: dict[str, Any] | None = None
    if n > 1:
        run, _ = ring_op(args.ring_size)
        fastest = float("inf")
        for i in range(4):  # one warm-up, three timed
            comm.Barrier()
            t0 = time.perf_counter()
            run()
            elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if i:
                fastest = min(fastest, elapsed)
        ring = {"bytes": args.ring_size, "time_s": fastest,
                "busbw_Bps": 2 * (n - 1) / n * args.ring_size / fastest}
    if rank == 0:
        assert gathered is not None
        # one line per pair, then the summary: output lines are bounded (Open MPI and the
        # launcher cut very long ones), and 16 hosts already make 120 pairs
        for part in gathered:
            for pair in part:
                print("RINGCHECK-PAIR " + json.dumps(pair), flush=True)
        out = {"n": n, "rounds": len(schedule), "passes": args.passes, "pair_bytes": args.size,
               "pair_count": n * (n - 1) // 2, "ring": ring,
               "pairs_s": pair_s, "elapsed_s": time.perf_counter() - started}
        print("RINGCHECK " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
