"""bench/train/strategies.py's pure parts: the cells it runs, the cost model's step prediction per
strategy, and the winners measured and predicted."""

from __future__ import annotations

import pytest

from ringtrain.bench.model import costmodel
from ringtrain.bench.train.strategies import (
    StrategyBench,
    annotate,
    cell_spec,
    checks,
    predict,
    render,
)
from ringtrain.spec import Strategy

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


def _measured(strategy: str, step_s: float, exchange_s: float) -> dict[str, object]:
    return {**_row(strategy, 0, step_s), "exchange_s": exchange_s}


def test_a_cell_off_by_more_than_15_percent_gets_its_measured_cause() -> None:
    # modelled: T1 10 ms + the ring's S/B = 16 ms at N=2, so 26 ms
    within, transport, overlap, contention, both = annotate([
        _measured("horovod", 0.027, 0.016),
        _measured("tf-multiworker", 0.062, 0.047),  # 10 + 47 = 57: adds up; the exchange 2.9x
        _measured("horovod", 0.050, 0.080),  # 10 + 80 = 90 > 50: the two ran at once
        _measured("horovod", 0.060, 0.016),  # exchange as modelled, step far above 26 ms
        _measured("horovod", 0.0309, 0.0176),  # exchange 1.1x, step 1.12x: neither alone
    ], P)
    assert within["cause"] is None
    assert transport["modelled_exchange_s"] == pytest.approx(0.016)
    assert transport["cause"].startswith("transport: the exchange alone takes 47.0 ms "
                                         "against 16.0 ms modelled (2.94x)")
    assert overlap["cause"].startswith("transport and overlap: the exchange alone takes 80.0 "
                                       "ms against 16.0 ms modelled (5.00x); the step (50.0 "
                                       "ms) is 0.56x T1 + exchange (90.0 ms)")
    assert contention["cause"].startswith("contention: the step (60.0 ms) is 2.31x T1 + "
                                          "exchange (26.0 ms)")
    assert "the exchange alone is as modelled (16.0 ms against 16.0 ms)" in contention["cause"]
    assert both["cause"].startswith("transport and contention, each within 15%, together not: "
                                    "the exchange alone takes 17.6 ms against 16.0 ms modelled "
                                    "(1.10x); the step (30.9 ms) is 1.12x")
    meta = {"id": "x", "model": "dense", "hosts": "localhost:2", "batch_size": 32,
            "params": {"a": 0.0, "B": 1e9, "g": 0.0}, "params_from": "test"}
    text = render([within, transport], meta)
    assert "| 47.0 / 16.0 | 57.0 |" in text
    assert "- N=2 tf-multiworker: transport: the exchange alone" in text
    assert "- N=2 horovod:" not in text  # within 15%: no cause to give
    assert "host cores" not in text  # measured by no cell here


def test_a_cause_says_how_busy_the_cores_were_when_it_was_measured() -> None:
    row = {**_measured("horovod", 0.060, 0.016),
           "cpu_busy": {"steps": 0.97, "exchange": 0.41}}
    (out,) = annotate([row], P)
    assert out["cause"].startswith("contention: the step (60.0 ms)")
    assert out["cause"].endswith("(host cores 97% busy in the steps, 41% in the exchange "
                                 "alone)")


def test_rows_without_an_exchange_measurement_get_no_cause() -> None:
    (row,) = annotate([_row("horovod", 0, 0.5)], P)  # a report from before exchange_s
    assert row["cause"] is None
    assert "| - / 16.0 | - |" in render([row], {
        "id": "x", "model": "dense", "hosts": "h", "batch_size": 32,
        "params": {"a": 0.0, "B": 1e9, "g": 0.0}, "params_from": "test"})


def test_horovod_cells_pin_open_mpis_ring_and_tf_cells_get_their_strategy() -> None:
    cfg = StrategyBench(ps_hosts="own")
    ring = cell_spec(cfg, 2, "horovod", 0)
    args = list(ring.mpi_args)
    assert args[args.index("coll_tuned_allreduce_algorithm") + 1] == "4"  # the modelled ring
    assert ring.strategy is Strategy.HOROVOD and ring.ps_hosts == "shared"
    ps = cell_spec(cfg, 4, "tf-ps", 3)
    assert "coll_tuned_allreduce_algorithm" not in ps.mpi_args
    assert (ps.strategy, ps.ps, ps.np, ps.ps_hosts) == (Strategy.TF_PS, 3, 4, "own")
    assert ps.supervision.heartbeat_timeout == 10.0
    shaped = cell_spec(StrategyBench(heartbeat_timeout_s=60.0), 2, "tf-ps", 1)
    assert shaped.supervision.heartbeat_timeout == 60.0
