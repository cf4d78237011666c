"""How much of the machine other people's processes used while a benchmark round ran.

This machine is shared: a test run elsewhere takes cores from the ranks and the round measures
the neighbours, not the transport. CPU used by the round's own processes is *ours*: this
process and its waited-for descendants (mpirun and the local ranks it reaps: exact, from
``getrusage(RUSAGE_CHILDREN)``), plus anything in the given network namespaces (the simulated
hosts' ranks, children of their sshd: sampled every ``interval`` s by a thread). The rest of
the machine's busy time (``psutil.cpu_times``) is *foreign*; ``foreign`` is that time as a
fraction of the machine's capacity (wall time x cores) over the round.

A namespace process's CPU after its last sample escapes the sampling (and so counts as
foreign: the estimate errs towards rejecting a round).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from ringtrain.sim.proc import netns_id


def _busy_seconds() -> float:
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def own_seconds() -> float:
    """CPU of this process and of every descendant it (or they) waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class CpuMonitor:
    """``with CpuMonitor(root_pid, netns_paths) as m: ...``; then ``m.foreign``, ``m.ours``."""

    def __init__(self, netns_paths: Sequence[Path] = (), interval: float = 0.25) -> None:
        self.netns = {i for p in netns_paths if (i := netns_id(p)) is not None}
        self.interval = interval
        self.root: int | None = None
        self.cpu: dict[int, float] = {}  # our pid -> last seen CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)
        self.ours = self.foreign = 0.0
        self._t0 = self._busy0 = self._self0 = 0.0

    def _ours(self) -> list[psutil.Process]:
        if not self.netns:
            return []
        return [p for p in psutil.process_iter()
                if netns_id(Path(f"/proc/{p.pid}/ns/net")) in self.netns]

    def sample(self) -> None:
        for p in self._ours():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            self.cpu[p.pid] = float(t.user + t.system)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> CpuMonitor:
        self._t0, self._busy0 = time.monotonic(), _busy_seconds()
        self._self0 = own_seconds()
        self._thread.start()
        return self

    def watch(self, pid: int) -> None:
        """The round's mpirun (its CPU is counted once it has been waited for)."""
        self.root = pid

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy = _busy_seconds() - self._busy0
        self.ours = sum(self.cpu.values()) + own_seconds() - self._self0
        cores = os.cpu_count() or 1
        self.foreign = max(0.0, busy - self.ours) / (wall * cores)
