"""Scaling efficiency of data-parallel training on a GPU cluster, from public inputs (pure).

A step of one GPU takes ``T_1``. It is split over the layers by FLOPs: each layer's forward
FLOPs, and ``bwd_per_fwd`` times as many backward (a layer computes the gradients of its
input and of its weights; the first layer has no input gradient, so half). FLOPs rather than
parameters, because the two are unrelated across a network: VGG-16's fully connected layers
hold 89% of its parameters and 0.8% of its FLOPs, its convolutions the reverse. The backward
pass runs from the last layer to the first, so a layer's gradient is ready once the backward
of every layer after it, and its own, is done: the large late layers first.

Horovod (2017 defaults) runs a background cycle every ``cycle_s``: it negotiates which tensors
every rank has ready (a gather and a broadcast through a tree, ``2 ceil(log2 N)`` network
steps), fuses them in buffers of up to ``fusion_bytes``, all-reduces each buffer in turn, and
starts the next cycle when both the work and the cycle time are over. The step ends when the
last all-reduce does (or the backward pass, if later); efficiency = T_1 / T_N.

All-reduce of S bytes over servers of L GPUs, M servers (``allreduce_s``):

    hierarchical   a_call + 2(L-1)(a_intra + S/(L B_intra)) + 2(M-1)(a_net + S/(M B_net))
                   (reduce-scatter and all-gather inside the server, the L shards' rings
                   between servers sharing the server's NIC)
    flat ring      a_call + 2(N-M) a_intra + 2(M-1) a_net + 2(N-1)/N S / min(B_net, B_intra)
                   (NCCL's own ring through every GPU: its latency model, tuning.cc)

The parameter-server alternative on the same hardware (``predict_ps``), push then pull through
k servers, each on a NIC of its own: every gradient is pushed when ready, then every variable
is pulled. A worker server's NIC carries its L GPUs' bytes, a server's NIC N/k workers' share,
so each byte costs ``max(L, N/k) / B_net``; the servers' summation is taken as free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Workload:
    """A model on one GPU: (gradient bytes, forward FLOPs) per layer in forward order, T_1."""

    model: str
    units: tuple[tuple[float, float], ...]
    step_s: float

    @property
    def grad_bytes(self) -> float:
        return sum(b for b, _ in self.units)


@dataclass(frozen=True, slots=True)
class Cluster:
    """Servers of GPUs, their links (bytes/s, seconds per ring step) and Horovod's settings."""

    servers: int
    gpus_per_server: int
    net_Bps: float
    net_lat_s: float
    intra_Bps: float
    intra_lat_s: float
    call_lat_s: float
    fusion_bytes: float
    cycle_s: float
    hierarchical: bool = True
    bwd_per_fwd: float = 2.0

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server


@dataclass(frozen=True, slots=True)
class Prediction:
    model: str
    gpus: int
    step_1_s: float
    step_n_s: float
    comm_s: float  # all gradients all-reduced after the backward pass, in fused buffers
    calls: int  # all-reduce calls in the overlapped step
    efficiency: float  # overlapped from the layer order
    efficiency_no_overlap: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def allreduce_s(c: Cluster, nbytes: float) -> float:
    lo, m = c.gpus_per_server, c.servers
    n = lo * m
    if n < 2 or nbytes <= 0:
        return 0.0
    if c.hierarchical:
        intra = 2 * (lo - 1) * (c.intra_lat_s + nbytes / (lo * c.intra_Bps))
        inter = 2 * (m - 1) * (c.net_lat_s + nbytes / (m * c.net_Bps))
        return c.call_lat_s + intra + inter
    bw = min(c.net_Bps, c.intra_Bps) if m > 1 else c.intra_Bps
    return (c.call_lat_s + 2 * (n - m) * c.intra_lat_s + 2 * (m - 1) * c.net_lat_s
            + 2 * (n - 1) / n * nbytes / bw)


def negotiate_s(c: Cluster) -> float:
    """Horovod's per-cycle negotiation: a gather and a broadcast through a binary tree."""
    return 2 * math.ceil(math.log2(c.gpus)) * c.net_lat_s if c.gpus > 1 else 0.0


def ready_times(w: Workload, bwd_per_fwd: float) -> list[tuple[float, float]]:
    """(seconds into the step, bytes) of each gradient, in the order they become ready."""
    fwd = [f for _, f in w.units]
    bwd = [bwd_per_fwd * f for f in fwd]
    if bwd:
        bwd[0] /= 2  # the first layer computes no input gradient
    total = sum(fwd) + sum(bwd)
    if total <= 0:
        raise ValueError(f"{w.model}: no FLOPs to apportion the step over")
    per_flop = w.step_s / total
    t = sum(fwd) * per_flop
    out = []
    for (nbytes, _), b in zip(reversed(w.units), reversed(bwd), strict=True):
        t += b * per_flop
        out.append((t, nbytes))
    return out


def _fused(sizes: Sequence[float], limit: float) -> list[float]:
    """Buffers of up to ``limit`` bytes, tensors in order; a larger tensor goes alone."""
    out: list[float] = []
    buf = 0.0
    for b in sizes:
        if buf and buf + b > limit:
            out.append(buf)
            buf = 0.0
        buf += b
    if buf:
        out.append(buf)
    return out


def horovod_cycles(ready: Sequence[tuple[float, float]], c: Cluster,
                   op: Callable[[float], float]) -> tuple[float, int]:
    """When the last all-reduce ends, and how many were made, under Horovod's cycle."""
    i, t, end, calls = 0, 0.0, 0.0, 0
    while i < len(ready):
        if ready[i][0] > t:  # idle until the first cycle at or after the next ready tensor
            t += math.ceil((ready[i][0] - t) / c.cycle_s - 1e-9) * c.cycle_s
        j = i
        while j < len(ready) and ready[j][0] <= t + 1e-12:
            j += 1
        buffers = _fused([b for _, b in ready[i:j]], c.fusion_bytes)
        work = negotiate_s(c) + sum(op(b) for b in buffers)
        calls += len(buffers)
        end = t + work
        t = max(end, t + c.cycle_s)
        i = j
    return end, calls


def predict(w: Workload, c: Cluster) -> Prediction:
    """Horovod's ring (hierarchical or flat) on the cluster, overlapped by the layer order."""
    if c.gpus < 2:
        return Prediction(w.model, c.gpus, w.step_s, w.step_s, 0.0, 0, 1.0, 1.0)
    after = _fused([b for b, _ in reversed(w.units)], c.fusion_bytes)
    comm = negotiate_s(c) + sum(allreduce_s(c, b) for b in after)
    end, calls = horovod_cycles(ready_times(w, c.bwd_per_fwd), c, lambda b: allreduce_s(c, b))
    step = max(w.step_s, end)
    return Prediction(w.model, c.gpus, w.step_s, step, comm, calls, w.step_s / step,
                      w.step_s / (w.step_s + comm))


def ps_byte_s(c: Cluster, k: int) -> float:
    """Seconds per gradient byte on the busiest NIC of a push (or a pull) through k servers."""
    return max(c.gpus_per_server, c.gpus / k) / c.net_Bps


def predict_ps(w: Workload, c: Cluster, k: int) -> Prediction:
    """Push each gradient when ready, one after another on the link, then pull every variable."""
    if k < 1:
        raise ValueError(f"k={k}: a parameter server needs at least one shard")
    per_byte = ps_byte_s(c, k)
    free = 0.0
    for ready, nbytes in ready_times(w, c.bwd_per_fwd):
        free = max(ready, free) + c.net_lat_s + nbytes * per_byte
    pull = c.net_lat_s + w.grad_bytes * per_byte
    step = max(w.step_s, free) + pull
    exchange = len(w.units) * c.net_lat_s + 2 * w.grad_bytes * per_byte + c.net_lat_s
    return Prediction(w.model, c.gpus, w.step_s, step, exchange, len(w.units), w.step_s / step,
                      w.step_s / (w.step_s + exchange))


@dataclass(frozen=True, slots=True)
class Sensitivity:
    name: str
    low: float  # efficiency with the input x (1 - rel)
    high: float  # efficiency with the input x (1 + rel)

    @property
    def spread(self) -> float:
        return abs(self.high - self.low)


SENSITIVE = ("step_s", "grad_bytes", "net_Bps", "net_lat_s", "intra_Bps", "intra_lat_s",
             "call_lat_s", "fusion_bytes", "cycle_s", "bwd_per_fwd")


def scaled(w: Workload, c: Cluster, name: str, factor: float) -> tuple[Workload, Cluster]:
    """The workload and cluster with one input multiplied by ``factor``."""
    if name == "step_s":
        return replace(w, step_s=w.step_s * factor), c
    if name == "grad_bytes":
        return replace(w, units=tuple((b * factor, f) for b, f in w.units)), c
    if name not in SENSITIVE:
        raise ValueError(f"unknown input {name!r}; expected one of {SENSITIVE}")
    return w, replace(c, **{name: getattr(c, name) * factor})


def sensitivity(w: Workload, c: Cluster, rel: float = 0.2) -> list[Sensitivity]:
    """Each input at -rel and +rel alone; the input that moves the efficiency most first."""
    out = []
    for name in SENSITIVE:
        lo = predict(*scaled(w, c, name, 1 - rel)).efficiency
        hi = predict(*scaled(w, c, name, 1 + rel)).efficiency
        out.append(Sensitivity(name, lo, hi))
    return sorted(out, key=lambda s: -s.spread)
