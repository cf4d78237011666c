"""Rank program: time a parameter-server exchange over gRPC (push-then-pull and pipelined).

Runs under mpirun with ``k + N`` ranks: ranks ``0..k-1`` are PS shards, the rest workers (put
them on hosts of their own to match the cost model). MPI is used only to exchange the shards'
addresses, for the workers' barrier before each timed iteration and to take the max time over
workers; every byte of the exchange itself goes over gRPC. Each worker's float32 buffer of S
bytes is split into k contiguous ranges (one per shard) and each range into chunks of at most
``--chunk-bytes``; ``--window`` RPCs per shard are in flight at once.

* ``sync``: push every chunk to its shard, wait for all acks, then pull every sum;
* ``pipe``: one PushPull RPC per chunk, ``--window`` of them in flight per shard.

The first worker prints one ``RESULT {json}`` line per (mode, size). Shards wait for the end on
a non-blocking barrier polled every 50 ms, so they do not spin a core.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ringtrain.bench.allreduce.ps_grpc import Shard, ShardClient, pack, serve

MODES = ("sync", "pipe")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--sizes", required=True, help="comma-separated buffer sizes in bytes")
    p.add_argument("--modes", default="sync,pipe")
    p.add_argument("--chunk-bytes", type=int, default=1 << 20)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--advertise", choices=("loopback", "hostname"), default="loopback")
    return p.parse_args(argv)


def advertised_ip(how: str) -> str:
    return "127.0.0.1" if how == "loopback" else socket.gethostbyname(socket.gethostname())


def run_shard(args: argparse.Namespace, comm: Any, workers: int) -> None:
    loop = asyncio.new_event_loop()
    shard = Shard(workers)
    bind = "127.0.0.1:0" if args.advertise == "loopback" else "0.0.0.0:0"
    server, port = loop.run_until_complete(serve(shard, bind, args.chunk_bytes))
    thread = threading.Thread(target=loop.run_forever, name="ps-shard", daemon=True)
    thread.start()
    comm.allgather(f"{advertised_ip(args.advertise)}:{port}")
    done = comm.Ibarrier()
    while not done.Test():
        time.sleep(0.05)
    asyncio.run_coroutine_threadsafe(server.stop(grace=1.0), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


def split(total: int, parts: int, chunk: int) -> list[list[tuple[int, int]]]:
    """Element ranges ``[(lo, hi), ...]`` per shard: ``parts`` near-equal contiguous ranges of
    ``total`` float32 elements, each cut into pieces of at most ``chunk`` bytes."""
    per = chunk // 4
    bounds = [int(b) for b in np.linspace(0, total, parts + 1)]
    return [[(lo, min(lo + per, end)) for lo in range(start, end, per)]
            for start, end in itertools.pairwise(bounds)]


async def windowed(calls: list[Callable[[], Awaitable[None]]], window: int) -> None:
    sem = asyncio.Semaphore(window)

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        async with sem:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


class Worker:
    """One worker's buffers and its exchange with every shard."""

    def __init__(self, clients: list[ShardClient], index: int, nbytes: int,
                 args: argparse.Namespace) -> None:
        self.clients, self.index, self.window = clients, index, args.window
        self.send = np.ones(nbytes // 4, dtype=np.float32)
        self.recv = np.zeros_like(self.send)
        self.ranges = split(self.send.size, len(clients), args.chunk_bytes)
        self.step = 0

    def _calls(self, s: int, rpc: Any, payload: bool, store: bool
               ) -> list[Callable[[], Awaitable[None]]]:
        """One coroutine factory per chunk of shard ``s``: send (with or without the chunk's
        data) and, when ``store``, copy the reply (the sum) into the receive buffer."""

        def make(c: int, lo: int, hi: int) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                data = self.send[lo:hi].tobytes() if payload else b""
                reply = await rpc(pack(self.step, self.index, c, data))
                if store:
                    self.recv[lo:hi] = np.frombuffer(reply, dtype=np.float32)
            return call

        return [make(c, lo, hi) for c, (lo, hi) in enumerate(self.ranges[s])]

    async def _phase(self, method: str, payload: bool, store: bool) -> None:
        await asyncio.gather(*(
            windowed(self._calls(s, getattr(client, method), payload, store), self.window)
            for s, client in enumerate(self.clients)))

    async def exchange(self, mode: str) -> None:
        """One all-reduce through the shards: push-then-pull (``sync``) or pipelined."""
        self.step += 1
        if mode == "sync":
            await self._phase("push", payload=True, store=False)
            await self._phase("pull", payload=False, store=True)
        else:
            await self._phase("push_pull", payload=True, store=True)


async def time_cell(worker: Worker, wcomm: Any, mode: str, args: argparse.Namespace) -> list[float]:
    from mpi4py import MPI

    for i in range(args.warmup):
        await worker.exchange(mode)
        if i == 0 and not np.all(worker.recv == float(wcomm.Get_size())):
            raise SystemExit(f"PS {mode}: sum {worker.recv[:4]}..., expected {wcomm.Get_size()}")
    local = np.empty(args.reps)
    for i in range(args.reps):
        wcomm.Barrier()
        t0 = time.perf_counter()
        await worker.exchange(mode)
        local[i] = time.perf_counter() - t0
    worst = np.empty_like(local)
    wcomm.Allreduce(local, worst, op=MPI.MAX)
    return [float(t) for t in worst]


async def run_worker(args: argparse.Namespace, wcomm: Any, addresses: list[str]) -> None:
    clients = [ShardClient(a, args.chunk_bytes) for a in addresses]
    try:
        for nbytes in (int(s) for s in args.sizes.split(",")):
            worker = Worker(clients, wcomm.Get_rank(), nbytes, args)
            for mode in args.modes.split(","):
                times = await time_cell(worker, wcomm, mode, args)
                if wcomm.Get_rank() == 0:
                    row = {"impl": "ps-grpc", "mode": mode, "bytes": nbytes,
                           "ranks": wcomm.Get_size(), "shards": args.shards, "times": times,
                           "chunk_bytes": args.chunk_bytes, "window": args.window}
                    print("RESULT " + json.dumps(row), flush=True)
    finally:
        for c in clients:
            await c.close()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    workers = comm.Get_size() - args.shards
    if args.shards < 1 or workers < 2:
        raise SystemExit(f"need --shards >= 1 and at least 2 workers (have {comm.Get_size()} "
                         f"ranks, {args.shards} shards)")
    is_shard = comm.Get_rank() < args.shards
    wcomm = comm.Split(0 if is_shard else 1, comm.Get_rank())
    if is_shard:
        run_shard(args, comm, workers)
        return 0
    addresses = [a for a in comm.allgather(None) if a]
    asyncio.run(run_worker(args, wcomm, addresses))
    comm.Ibarrier().Wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
