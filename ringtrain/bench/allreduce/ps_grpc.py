"""A proto-free parameter-server service over gRPC (grpc.aio, generic handlers, raw bytes).

Each message is a 12-byte little-endian header ``(step, worker, chunk)`` followed by float32
payload bytes. Three unary methods on service ``ringtrain.bench.PS``:

* ``Push``: add the chunk into the shard's accumulator for ``(step, chunk)``; answers at once;
* ``Pull``: wait until all N workers pushed ``(step, chunk)``, answer the sum;
* ``PushPull``: both in one call (the pipelined variant: a worker keeps several of these in
  flight, so later chunks travel up while earlier sums travel down).

An entry is freed once all N workers have pulled it. Messages stay below gRPC's limit: the
client splits a shard's range into chunks of at most ``chunk_bytes``.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

import grpc  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

SERVICE = "ringtrain.bench.PS"
HEADER = struct.Struct("<III")
GRPC_MAX_DEFAULT = 4 * 1024 * 1024


def channel_options(chunk_bytes: int) -> list[tuple[str, int]]:
    limit = max(GRPC_MAX_DEFAULT, chunk_bytes + 4096)
    return [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.enable_http_proxy", 0),  # benchmark traffic goes to the shard, never to a proxy
    ]


def pack(step: int, worker: int, chunk: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(step, worker, chunk) + payload


@dataclass
class _Entry:
    acc: npt.NDArray[np.float32] | None = None
    pushed: int = 0
    pulled: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: bytes = b""


class Shard:
    """One PS shard's state: accumulators keyed by (step, chunk), for ``workers`` pushers."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.entries: dict[tuple[int, int], _Entry] = {}

    def _entry(self, key: tuple[int, int]) -> _Entry:
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry()
        return entry

    def push(self, request: bytes) -> _Entry:
        step, _worker, chunk = HEADER.unpack_from(request)
        entry = self._entry((step, chunk))
        data = np.frombuffer(request, dtype=np.float32, offset=HEADER.size)
        if entry.acc is None:
            entry.acc = data.copy()
        else:
            np.add(entry.acc, data, out=entry.acc)
        entry.pushed += 1
        if entry.pushed == self.workers:
            entry.result = entry.acc.tobytes()
            entry.acc = None
            entry.done.set()
        return entry

    async def pull(self, request: bytes) -> bytes:
        step, _worker, chunk = HEADER.unpack_from(request)
        key = (step, chunk)
        entry = self._entry(key)
        await entry.done.wait()
        entry.pulled += 1
        if entry.pulled == self.workers:
            del self.entries[key]
        return entry.result

    async def rpc_push(self, request: bytes, _context: Any) -> bytes:
        self.push(request)
        return b""

    async def rpc_pull(self, request: bytes, _context: Any) -> bytes:
        return await self.pull(request)

    async def rpc_push_pull(self, request: bytes, _context: Any) -> bytes:
        self.push(request)
        return await self.pull(request)

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {
            "Push": grpc.unary_unary_rpc_method_handler(self.rpc_push),
            "Pull": grpc.unary_unary_rpc_method_handler(self.rpc_pull),
            "PushPull": grpc.unary_unary_rpc_method_handler(self.rpc_push_pull),
        }
        return grpc.method_handlers_generic_handler(SERVICE, methods)


async def serve(shard: Shard, bind: str, chunk_bytes: int) -> tuple[grpc.aio.Server, int]:
    """Start a shard's server on ``bind`` (``host:0``: a free port); returns it and the port."""
    server = grpc.aio.server(options=channel_options(chunk_bytes))
    server.add_generic_rpc_handlers((shard.handler(),))
    port = server.add_insecure_port(bind)
    if port == 0:
        raise OSError(f"gRPC could not bind {bind}")
    await server.start()
    return server, port


class ShardClient:
    """A worker's stubs for one shard (raw bytes in, raw bytes out)."""

    def __init__(self, address: str, chunk_bytes: int) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=channel_options(chunk_bytes))
        self.push = self.channel.unary_unary(f"/{SERVICE}/Push")
        self.pull = self.channel.unary_unary(f"/{SERVICE}/Pull")
        self.push_pull = self.channel.unary_unary(f"/{SERVICE}/PushPull")

    async def close(self) -> None:
        await self.channel.close()
