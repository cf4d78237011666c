"""Ceilings measured in the same run as the benchmark, and the machine's load.

* memcpy: numpy copy of a buffer into a preallocated one (bytes/s); no transfer can beat it;
* reduce: ``np.add(acc, x, out=acc)`` on float32 (s per byte): the model's ``g`` measured
  directly;
* TCP loopback: one socket pair on 127.0.0.1, a sender and a receiver thread (the kernel
  copies; the GIL is released inside send/recv);
* load: 1-minute load average, CPU busy fraction over a short window, and the CPU pressure
  (``/proc/pressure/cpu`` some avg10) where the kernel has it.

The raw MPI ceiling (point-to-point) is measured by ``ring_runner --impl p2p`` under mpirun.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

QUICK_BYTES = 32 * 1024 * 1024


def _best_seconds(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def memcpy_bps(nbytes: int = QUICK_BYTES, repeats: int = 5) -> float:
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages once
    return nbytes / _best_seconds(lambda: np.copyto(dst, src), repeats)


def reduce_g(nbytes: int = QUICK_BYTES, repeats: int = 5) -> float:
    """Seconds per byte of an in-place float32 sum (the model's ``g``)."""
    acc = np.ones(nbytes // 4, dtype=np.float32)
    x = np.ones_like(acc)
    np.add(acc, x, out=acc)
    return _best_seconds(lambda: np.add(acc, x, out=acc), repeats) / nbytes


def tcp_loopback_bps(nbytes: int = 64 * 1024 * 1024, timeout: float = 30.0) -> float:
    """One-way TCP throughput over 127.0.0.1 (one connection, 1 MiB writes)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(timeout)
    port = server.getsockname()[1]
    got = [0]

    def receive() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout)
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            while got[0] < nbytes:
                n = conn.recv_into(view)
                if n == 0:
                    break
                got[0] += n

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    payload = memoryview(bytes(1 << 20))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        t0 = time.perf_counter()
        sent = 0
        while sent < nbytes:
            client.sendall(payload)
            sent += len(payload)
        thread.join(timeout)
        elapsed = time.perf_counter() - t0
    server.close()
    return got[0] / elapsed


@dataclass(frozen=True, slots=True)
class Load:
    loadavg1: float
    cpu_busy: float
    cpu_pressure: float | None
    cores: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_pressure() -> float | None:
    """``some avg10`` from /proc/pressure/cpu (percent of time some task waited for a CPU)."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(f.split("=", 1) for f in first.split()[1:] if "=" in f)
    try:
        return float(fields["avg10"])
    except (KeyError, ValueError):
        return None


def load(window: float = 0.2) -> Load:
    busy = psutil.cpu_percent(interval=window) / 100.0
    return Load(loadavg1=os.getloadavg()[0], cpu_busy=busy, cpu_pressure=cpu_pressure(),
                cores=os.cpu_count() or 1)


def wait_for_quiet(max_wait: float, busy_below: float = 0.2, window: float = 1.0) -> float:
    """Wait (at most ``max_wait`` s) until the CPUs were less than ``busy_below`` busy over a
    ``window``; returns the seconds waited (``max_wait`` or more when it never got quiet)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_wait:
        if psutil.cpu_percent(interval=window) / 100.0 < busy_below:
            break
    return time.monotonic() - t0


@dataclass(frozen=True, slots=True)
class Quick:
    """A quick ceiling probe taken before and after each round (for drift detection)."""

    memcpy_bps: float
    reduce_g: float
    load: Load

    def as_dict(self) -> dict[str, Any]:
        return {"memcpy_bps": self.memcpy_bps, "reduce_g": self.reduce_g,
                "load": self.load.as_dict()}


def quick() -> Quick:
    return Quick(memcpy_bps=memcpy_bps(), reduce_g=reduce_g(), load=load())


def drift(before: Quick, after: Quick) -> float:
    """The larger relative change of the memcpy and reduce ceilings across a round."""
    m = abs(after.memcpy_bps / before.memcpy_bps - 1.0)
    r = abs(after.reduce_g / before.reduce_g - 1.0)
    return max(m, r)
