"""The cost model and its least-squares fit, on synthetic data with known parameters."""

from __future__ import annotations

import math

import pytest

from ringtrain.bench.model import costmodel as model
from ringtrain.bench.model.costmodel import Params, Sample

TRUE = Params(a=50e-6, B=50e6, g=0.4e-9)  # 50 us, 400 Mbit/s, 2.5 GB/s reduction
SIZES = [4 * 1024 * 4**i for i in range(10)]  # 4 KB .. 1 GB


def _cells(algos: tuple[str, ...], ns: tuple[int, ...], ks: tuple[int, ...]) -> list[tuple]:
    return [(algo, s, n, k) for algo in algos for s in SIZES for n in ns
            for k in (ks if algo != "ring" else (1,))]


def test_ring_formula_matches_the_textbook() -> None:
    s, n = 64e6, 4
    want = 2 * 3 * TRUE.a + 2 * 3 / 4 * s / TRUE.B + 3 / 4 * s * TRUE.g
    assert model.ring_time(TRUE, s, n) == pytest.approx(want, rel=1e-12)


def test_ps_push_then_pull_and_pipelined() -> None:
    s, n = 64e6, 4
    # k=1: one shard link carries N*S in and N*S out
    assert model.ps_time(TRUE, s, n, 1) == pytest.approx(
        2 * TRUE.a + 2 * 4 * s / TRUE.B + 3 * s * TRUE.g)
    # k >= N: the worker link (S up, S down) is the bottleneck
    assert model.ps_time(TRUE, s, n, 8) == pytest.approx(
        2 * TRUE.a + 2 * s / TRUE.B + 3 / 8 * s * TRUE.g)
    piped = model.ps_time(TRUE, s, n, 2, pipelined=True)
    assert piped == pytest.approx(2 * TRUE.a + 2 * s / TRUE.B + 1.5 * s * TRUE.g)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 8, 16])
def test_pipelined_ps_wins_exactly_above_the_ideal_crossover(n: int) -> None:
    """With latency and reduction cost zero, the k where pipelined PS first wins is the smallest
    integer above N^2/(2(N-1))."""
    p = Params(a=0.0, B=1e9, g=0.0)
    k = model.crossover_k(p, p, 1e9, n)
    assert k == math.floor(model.ideal_crossover_k(n)) + 1
    assert model.ps_time(p, 1e9, n, k - 1, pipelined=True) >= model.ring_time(p, 1e9, n)


def test_two_workers_tie_and_never_cross() -> None:
    p = Params(a=0.0, B=1e9, g=0.0)
    assert model.crossover_k(p, p, 1e9, 2) is None
    assert model.ps_time(p, 1e9, 2, 4, pipelined=True) == pytest.approx(model.ring_time(p, 1e9, 2))


def test_crossover_bytes_solves_the_two_lines() -> None:
    ring, ps = Params(1e-4, 1e9, 0.0), Params(1e-3, 1e9, 0.0)
    s = model.crossover_bytes(ring, ps, 4, 4, pipelined=True)
    assert s is not None
    assert model.ring_time(ring, s, 4) == pytest.approx(model.ps_time(ps, s, 4, 4, pipelined=True))
    assert model.crossover_bytes(ring, ps, 4, 1, pipelined=False) is None


def test_fit_recovers_all_three_from_ps_data() -> None:
    """PS cells over several k separate B from g (their columns are not proportional)."""
    samples = model.synthetic(TRUE, _cells(("ps", "ps_pipe"), (2, 4, 8), (1, 2, 3, 4, 8)))
    fit = model.fit(samples)
    assert fit.fitted == ("a", "B", "g")
    assert fit.params.a == pytest.approx(TRUE.a, rel=1e-6)
    bandwidth = fit.params.B
    assert bandwidth == pytest.approx(TRUE.B, rel=1e-6)
    assert fit.params.g == pytest.approx(TRUE.g, rel=1e-6)
    assert fit.max_rel < 1e-9


def test_ring_alone_cannot_separate_b_and_g() -> None:
    samples = model.synthetic(TRUE, _cells(("ring",), (2, 4, 8), (1,)))
    with pytest.raises(ValueError, match="not identifiable"):
        model.fit(samples)
    fit = model.fit(samples, g=TRUE.g)
    assert fit.fitted == ("a", "B")
    assert (fit.params.a, fit.params.B) == pytest.approx((TRUE.a, TRUE.B), rel=1e-6)


def test_fit_with_noise_stays_close_and_reports_residuals() -> None:
    samples = model.synthetic(TRUE, _cells(("ring",), (2, 3, 4, 6, 8), (1,)), noise=0.02, seed=3)
    fit = model.fit(samples, g=TRUE.g)
    bandwidth = fit.params.B
    assert bandwidth == pytest.approx(TRUE.B, rel=0.03)
    assert fit.params.a == pytest.approx(TRUE.a, rel=0.15)
    assert 0.005 < fit.rms_rel < 0.04
    assert len(fit.ratios) == len(samples)
    assert all(math.isfinite(r) and r > 0 for r in fit.ratios)


def test_negative_latency_is_clamped_and_refitted() -> None:
    """Data with no latency plus noise that would pull a below zero: a is clamped to 0."""
    p = Params(a=0.0, B=1e8, g=0.0)
    samples = [Sample("ring", s, 4, 1, model.ring_time(p, s, 4) * (0.9 if s < 1e5 else 1.0))
               for s in SIZES]
    fit = model.fit(samples, g=0.0)
    assert fit.params.a == 0.0
    assert fit.fitted == ("B",)
    assert fit.params.B > 0


def test_fit_rejects_flat_or_bad_data() -> None:
    shrinking = [Sample("ring", s, 2, 1, 1.0 / s) for s in SIZES]
    with pytest.raises(ValueError, match="do not grow"):
        model.fit(shrinking, g=0.0)
    with pytest.raises(ValueError, match="positive"):
        model.fit([Sample("ring", 1e6, 2, 1, 0.0)], g=0.0)
    with pytest.raises(ValueError, match="unknown algorithm"):
        model.features("tree", 1e6, 4)
    with pytest.raises(ValueError):
        model.features("ring", 1e6, 1)


def test_nccl_tests_bandwidth_definitions() -> None:
    assert model.algbw(1e9, 2.0) == 5e8
    assert model.busbw(1e9, 2.0, 4) == pytest.approx(5e8 * 1.5)
    assert model.busbw(1e9, 1.0, 2) == pytest.approx(1e9)
