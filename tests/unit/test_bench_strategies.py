"""bench/strategies.py's pure parts: the cells it runs, the cost model's step prediction per
strategy, and the winners measured and predicted."""

from __future__ import annotations

import pytest

from ringtrain.bench import costmodel
from ringtrain.bench.strategies import StrategyBench, annotate, checks, predict, render

P = costmodel.Params(a=0.0, B=1e9, g=0.0)
S = 16_000_000


def _row(strategy: str, k: int, step_s: float, n: int = 2) -> dict[str, object]:
    return {"workers": n, "strategy": strategy, "k": k, "step_s": step_s, "t1_s": 0.01,
            "param_bytes": S, "samples_per_s": 64 / step_s}


def test_cells_run_every_strategy_and_each_k_for_tf_ps() -> None:
    cfg = StrategyBench(ns=(2, 4), ks=(1, 3))
    assert cfg.cells() == [(2, "horovod", 0), (2, "tf-multiworker", 0), (2, "tf-ps", 1),
                           (2, "tf-ps", 3), (4, "horovod", 0), (4, "tf-multiworker", 0),
                           (4, "tf-ps", 1), (4, "tf-ps", 3)]


def test_predictions_add_the_modelled_exchange_to_t1() -> None:
    ring = predict(_row("horovod", 0, 1.0, n=4), P)
    assert ring == pytest.approx(0.01 + 2 * 3 / 4 * S / 1e9)  # 2(N-1)/N S/B
    assert predict(_row("tf-multiworker", 0, 1.0, n=4), P) == ring
    assert predict(_row("tf-ps", 1, 1.0, n=4), P) == pytest.approx(0.01 + 2 * 4 * S / 1e9)
    assert predict(_row("tf-ps", 4, 1.0, n=4), P) == pytest.approx(0.01 + 2 * S / 1e9)
    assert predict(_row("horovod", 0, 1.0, n=1), P) == 0.01  # one worker: nothing to exchange


def test_winners_measured_and_predicted() -> None:
    rows = annotate([_row("horovod", 0, 0.05), _row("tf-ps", 1, 0.03),
                     {"workers": 2, "strategy": "tf-ps", "k": 2, "error": "failed"}], P)
    assert [r.get("winner_measured") for r in rows] == [False, True, None]
    assert [r.get("winner_predicted") for r in rows] == [True, False, None]
    meta = {"id": "x", "model": "dense", "hosts": "localhost:2", "batch_size": 32,
            "params": {"a": 0.0, "B": 1e9, "g": 0.0}, "params_from": "test"}
    text = render(rows, meta)
    assert "failed: failed" in text
    assert "N=2: measured winner tf-ps k=1; predicted horovod: DISAGREES" in text
    assert "for 0 of 1 worker counts" in text


def test_the_two_all_reduce_strategies_tie_in_the_prediction() -> None:
    rows = annotate([_row("horovod", 0, 1.13), _row("tf-multiworker", 0, 0.75),
                     _row("tf-ps", 1, 1.9)], P)
    assert [r["winner_predicted"] for r in rows] == [True, True, False]
    assert checks(rows) == [(2, "tf-multiworker", ["horovod", "tf-multiworker"], True)]


def test_every_cell_of_an_n_is_predicted_from_the_shared_t1() -> None:
    rows = [_row("horovod", 0, 0.09), _row("tf-multiworker", 0, 0.09), _row("tf-ps", 1, 0.09)]
    rows[0]["t1_s"], rows[1]["t1_s"], rows[2]["t1_s"] = 0.080, 0.084, 0.042  # chief alone
    out = annotate(rows, P)
    assert [r["t1_used_s"] for r in out] == [pytest.approx(0.082)] * 3
    assert out[2]["predicted_step_s"] == pytest.approx(0.082 + 2 * 2 * S / 1e9)
