"""Simulated Horovod workers for ``rendezvous_scale``: one asyncio process speaking Horovod
0.28.1's rendezvous protocol over raw HTTP, the way a worker's C++ core does (a new TCP
connection per request, HTTP/1.1 request, the server closes after its answer):

- re-init (``horovod/common/gloo/gloo_context.cc``, elastic reset): ``GET
  /rank_and_size/HOST:LOCAL_RANK``; the launcher holds the answer until every worker of the
  round has recorded itself (``WorkerStateRegistry``'s barrier);
- the three Gloo contexts, one after the other (``global``, ``local_HOST``,
  ``cross_LOCAL_RANK``), each Gloo's ``connectFullMesh`` through Horovod's ``HTTPStore``
  (``third_party/gloo/gloo/rendezvous/context.cc``, ``http_store.cc``): PUT ``rank_R`` (the
  host name), GET ``rank_I`` for every I < R, PUT ``R`` (one 136-byte tcp address per peer),
  then for every peer I: poll GET ``I`` every 10 ms until it exists, GET it again; a barrier
  among the context's members (Gloo's, over the pairs: here an asyncio barrier), then DELETE
  ``R`` (``HTTPStore::Finalize``).

``--mode sample:K`` keeps the linear part (both PUTs, the DELETE) and reads only K peers'
addresses instead of every peer's: the full mesh is quadratic in requests and cubic in bytes
(``gloo_mesh_cost``), out of reach of this machine at 512 and 4,096 workers.

Commands come as JSON lines on stdin, one answer line each on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

ADDRESS_BYTES = 136  # sizeof(gloo::transport::tcp::Address::Impl): sockaddr_storage + seq
POLL_S = 0.010  # HTTPStore::wait's sleep between polls
RETRIES, RETRY_S = 3, 0.5  # HTTPStore::PerformHTTP


def gloo_mesh_cost(size: int, address_bytes: int = ADDRESS_BYTES) -> tuple[int, int]:
    """(requests, bytes served) of one Gloo ``connectFullMesh`` of ``size`` ranks through
    Horovod's HTTPStore, with no failed poll: per rank 2 PUTs, ``rank`` GETs of host names, 2
    GETs per peer (the wait's poll that finds it, the get), 1 DELETE; each address GET carries
    the peer's whole table, ``size - 1`` addresses. Pure."""
    peers = size - 1
    requests = size * (2 + 2 * peers + 1) + size * peers // 2
    table = peers * address_bytes
    return requests, size * (table + 2 * peers * table)


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.failed = 0
        self.bytes_in = 0


async def http(port: int, method: str, path: str, stats: Stats,
               body: bytes = b"") -> tuple[int, bytes]:
    for attempt in range(RETRIES):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            data = await reader.read(-1)
            writer.close()
            stats.requests += 1
            head, _, payload = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status in (200, 404):
                stats.bytes_in += len(payload)
                return status, payload
        except (OSError, IndexError, ValueError):
            pass
        stats.failed += 1
        if attempt < RETRIES - 1:
            await asyncio.sleep(RETRY_S)
    raise RuntimeError(f"{method} {path}: failed {RETRIES} times")


async def reinit(port: int, host: str, slot: int, stats: Stats, t0: float) -> list[Any]:
    _, body = await http(port, "GET", f"/rank_and_size/{host}:{slot}", stats)
    return [host, slot, [int(x) for x in body.decode().split(",")], time.perf_counter() - t0]


async def mesh(port: int, scope: str, rank: int, size: int, host: str, sample: int | None,
               barrier: asyncio.Barrier, stats: Stats, table: bytes) -> None:
    pre = f"/{scope}/"
    await http(port, "PUT", f"{pre}rank_{rank}", stats, host.encode())
    peers = [i for i in range(size) if i != rank]
    if sample is None:
        for i in range(rank):
            await http(port, "GET", f"{pre}rank_{i}", stats)
    else:
        peers = [(rank + j) % size for j in range(1, min(sample, size - 1) + 1)]
    await http(port, "PUT", f"{pre}{rank}", stats, table)
    for i in peers:
        while (await http(port, "GET", f"{pre}{i}", stats))[0] != 200:
            await asyncio.sleep(POLL_S)
        await http(port, "GET", f"{pre}{i}", stats)
    await barrier.wait()
    await http(port, "DELETE", f"{pre}{rank}", stats)


async def worker(port: int, w: list[Any], sample: int | None,
                 barriers: dict[str, asyncio.Barrier], stats: Stats, t0: float) -> float:
    host, slot, rank, size, local_rank, local_size, cross_rank, cross_size = w
    for scope, r, n in ((("global", rank, size), (f"local_{host}", local_rank, local_size),
                         (f"cross_{slot}", cross_rank, cross_size))):
        table = bytes(ADDRESS_BYTES * (n - 1))
        await mesh(port, scope, r, n, host, sample, barriers[scope], stats, table)
    return time.perf_counter() - t0


async def serve_command(cmd: dict[str, Any]) -> dict[str, Any]:
    stats, t0 = Stats(), time.perf_counter()
    port = cmd["port"]
    if cmd["op"] == "reinit":
        out = await asyncio.gather(*(reinit(port, h, s, stats, t0) for h, s in cmd["slots"]))
        return {"answers": out, "requests": stats.requests, "failed": stats.failed,
                "seconds": time.perf_counter() - t0}
    sample = cmd.get("sample")
    members: dict[str, int] = {}
    for host, slot, *_ in cmd["workers"]:
        for scope in ("global", f"local_{host}", f"cross_{slot}"):
            members[scope] = members.get(scope, 0) + 1
    barriers = {scope: asyncio.Barrier(n) for scope, n in members.items()}
    done = await asyncio.gather(*(worker(port, w, sample, barriers, stats, t0)
                                  for w in cmd["workers"]))
    return {"first": min(done), "last": max(done), "requests": stats.requests,
            "failed": stats.failed, "bytes_in": stats.bytes_in}


def main() -> None:
    for line in sys.stdin:
        try:
            answer = asyncio.run(serve_command(json.loads(line)))
        except Exception as e:  # reported to the benchmark, which prints it
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
