"""Cost model of ring all-reduce and parameter-server (PS) exchange, fitted by least squares.

Pure (numpy only). ``S`` bytes per worker, ``N`` workers, ``k`` PS shards on hosts of their own,
every host on a full-duplex link of ``B`` bytes/s; ``a`` is the per-step latency (s) and ``g``
the reduction cost (s per byte reduced)::

    ring             T = 2(N-1) a + 2(N-1)/N S/B + (N-1)/N S g
    PS push-then-pull T = 2 a + 2 max(1, N/k) S/B + (N-1)/k S g
    PS pipelined     T = 2 a +   max(1, N/k) S/B + (N-1)/k S g

Push-then-pull moves S up and then S down each worker link, and N S/k in then out of each shard
link; pipelining overlaps the two directions (full duplex), halving the bandwidth term. The
pipelined PS therefore beats the ring once ``max(1, N/k) < 2(N-1)/N``, i.e. ``k > N^2/(2(N-1))``
(for N >= 3; at N = 2 both terms are S/B and they tie).

The model is linear in ``(a, 1/B, g)``, so the fit is linear least squares on relative error
(each row divided by its measured time: small and large sizes weigh alike). For the ring alone
the ``S/B`` and ``S g`` columns are proportional (ratio 2 for every N), so ``g`` cannot be
separated from ``B`` by ring timings: pass ``g`` measured elsewhere (a local reduction kernel).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ALGOS = ("ring", "ps", "ps_pipe")


@dataclass(frozen=True, slots=True)
class Params:
    """Latency ``a`` (s), bandwidth ``B`` (bytes/s), reduction cost ``g`` (s/byte)."""

    a: float
    B: float
    g: float


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured cell: algorithm, bytes per worker, workers, shards (ring: ignored), seconds."""

    algo: str
    nbytes: float
    n: int
    k: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted parameters, which of them were fitted (not fixed or clamped to 0), and the relative
    residuals ``measured/model - 1`` of every sample, in the order given."""

    params: Params
    fitted: tuple[str, ...]
    ratios: tuple[float, ...]
    rank: int

    @property
    def rms_rel(self) -> float:
        r = np.asarray(self.ratios) - 1.0
        return float(np.sqrt(np.mean(r * r))) if r.size else math.nan

    @property
    def max_rel(self) -> float:
        r = np.abs(np.asarray(self.ratios) - 1.0)
        return float(r.max()) if r.size else math.nan


def features(algo: str, nbytes: float, n: int, k: int = 1) -> tuple[float, float, float]:
    """Coefficients of ``(a, 1/B, g)`` in the model time of one cell."""
    if n < 2:
        raise ValueError(f"N={n}: an all-reduce needs at least 2 workers")
    if algo == "ring":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes, (n - 1) / n * nbytes
    if k < 1:
        raise ValueError(f"k={k}: a parameter server needs at least one shard")
    fan = max(1.0, n / k)
    if algo == "ps":
        return 2.0, 2.0 * fan * nbytes, (n - 1) / k * nbytes
    if algo == "ps_pipe":
        return 2.0, fan * nbytes, (n - 1) / k * nbytes
    raise ValueError(f"unknown algorithm {algo!r}; expected one of {ALGOS}")


def predict(p: Params, algo: str, nbytes: float, n: int, k: int = 1) -> float:
    fa, fb, fg = features(algo, nbytes, n, k)
    return fa * p.a + fb / p.B + fg * p.g


def ring_time(p: Params, nbytes: float, n: int) -> float:
    return predict(p, "ring", nbytes, n)


def ps_time(p: Params, nbytes: float, n: int, k: int, *, pipelined: bool = False) -> float:
    return predict(p, "ps_pipe" if pipelined else "ps", nbytes, n, k)


def ideal_crossover_k(n: int) -> float:
    """Shards above which the pipelined PS's bandwidth term beats the ring's: N^2/(2(N-1))."""
    return n * n / (2.0 * (n - 1))


def crossover_k(ring: Params, ps: Params, nbytes: float, n: int, k_max: int = 64) -> int | None:
    """Smallest k whose modelled pipelined-PS time is below the modelled ring time (or None)."""
    t_ring = ring_time(ring, nbytes, n)
    for k in range(1, k_max + 1):
        if ps_time(ps, nbytes, n, k, pipelined=True) < t_ring:
            return k
    return None


def crossover_bytes(ring: Params, ps: Params, n: int, k: int, *, pipelined: bool) -> float | None:
    """Size where the modelled ring and PS times are equal (both are linear in S), or None
    when the lines do not cross at a positive size."""
    algo = "ps_pipe" if pipelined else "ps"
    ra, rb, rg = features("ring", 1.0, n)
    pa, pb, pg = features(algo, 1.0, n, k)
    fixed = pa * ps.a - ra * ring.a
    slope = (rb / ring.B + rg * ring.g) - (pb / ps.B + pg * ps.g)
    if slope == 0 or fixed / slope <= 0:
        return None
    return fixed / slope


def _solve(rows: npt.NDArray[np.float64], target: npt.NDArray[np.float64],
           active: list[int]) -> npt.NDArray[np.float64]:
    coef = np.zeros(3)
    if active:
        sol, *_ = np.linalg.lstsq(rows[:, active], target, rcond=None)
        coef[active] = sol
    return coef


def fit(samples: Sequence[Sample], *, g: float | None = None, a: float | None = None) -> Fit:
    """Least-squares ``(a, B, g)`` minimising relative error; ``g``/``a`` may be fixed.

    Non-negativity by elimination: a fitted ``a`` or ``g`` below zero is clamped to 0 and the
    rest refitted. ``1/B`` must come out positive, else ValueError (the data do not grow
    with size)."""
    if not samples:
        raise ValueError("no samples to fit")
    x = np.array([features(s.algo, s.nbytes, s.n, s.k) for s in samples], dtype=np.float64)
    t = np.array([s.seconds for s in samples], dtype=np.float64)
    if np.any(t <= 0) or not np.all(np.isfinite(t)):
        raise ValueError("measured times must be positive and finite")
    fixed = {0: a, 2: g}
    target = t - sum(x[:, i] * v for i, v in fixed.items() if v is not None)
    rows = x / t[:, None]
    target = target / t
    active = [i for i in range(3) if fixed.get(i) is None]
    scale = np.abs(rows).max(axis=0)
    scale[scale == 0] = 1.0
    rows = rows / scale
    rank = int(np.linalg.matrix_rank(rows[:, active])) if active else 0
    if rank < len(active):
        raise ValueError(f"parameters {[('a', 'B', 'g')[i] for i in active]} are not "
                         "identifiable from these samples; fix g (or a)")
    coef = _solve(rows, target, active)
    for i in (0, 2):
        if i in active and coef[i] < 0:
            active.remove(i)
            coef = _solve(rows, target, active)
    coef = coef / scale
    if coef[1] <= 0:
        raise ValueError("fitted 1/B is not positive: times do not grow with size")
    params = Params(a=a if a is not None else float(coef[0]), B=float(1.0 / coef[1]),
                    g=g if g is not None else float(coef[2]))
    ratios = tuple(s.seconds / predict(params, s.algo, s.nbytes, s.n, s.k) for s in samples)
    return Fit(params, tuple(("a", "B", "g")[i] for i in active), ratios, rank)


def synthetic(p: Params, cells: Iterable[tuple[str, float, int, int]],
              noise: float = 0.0, seed: int = 0) -> list[Sample]:
    """Samples from the model itself (for tests and sanity checks): multiplicative noise."""
    rng = np.random.default_rng(seed)
    out = []
    for algo, nbytes, n, k in cells:
        t = predict(p, algo, nbytes, n, k) * (1.0 + noise * float(rng.standard_normal()))
        out.append(Sample(algo, nbytes, n, k, t))
    return out


def algbw(nbytes: float, seconds: float) -> float:
    """nccl-tests algorithm bandwidth: bytes / time."""
    return nbytes / seconds


def busbw(nbytes: float, seconds: float, n: int) -> float:
    """nccl-tests bus bandwidth of all-reduce: algbw * 2(N-1)/N (comparable to link speed)."""
    return algbw(nbytes, seconds) * 2.0 * (n - 1) / n
