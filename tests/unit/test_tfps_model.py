"""TF's ParameterServerStrategy modelled as measured (bench.train.tfps_model): pure."""

from __future__ import annotations

from typing import Any

import pytest

from ringtrain.bench.model import costmodel
from ringtrain.bench.train import strategies, tfps_model

S = 16.8e6  # the dense model's parameter bytes
B = 25e6  # a 200 Mbit/s link
UNIT = S / B
PARAMS = costmodel.Params(a=0.0, B=B, g=0.0)


def _row(n: int, k: int, step: float, exchange: float, strategy: str = "tf-ps") -> dict[str, Any]:
    return {"workers": n, "strategy": strategy, "k": k, "param_bytes": S, "step_s": step,
            "t1_s": 0.011, "exchange_s": exchange, "samples_per_s": 1.0}


# one-worker cells as measured on 200 Mbit/s links (2026-11-26): e(1) = 0.96, e(4) = 0.70
ONE_WORKER = [_row(1, 1, 1.41, 2 * UNIT / 0.96), _row(1, 4, 1.77, UNIT / 0.70 + UNIT / 0.96)]


def test_the_one_worker_cells_give_the_share_of_the_link_per_fan_in() -> None:
    e = tfps_model.efficiencies(ONE_WORKER, B)
    assert e == pytest.approx({1: 0.96, 4: 0.70})
    assert tfps_model.efficiencies(ONE_WORKER[1:], B) == {}  # no k = 1 cell: nothing
    failed = {**ONE_WORKER[0], "error": "timed out"}
    assert tfps_model.efficiencies([failed, ONE_WORKER[1]], B) == {}
    assert tfps_model.efficiencies([*ONE_WORKER, _row(4, 1, 3.8, 3.7)], B).keys() == {1, 4}


def test_where_the_ps_links_bound_it_is_their_busier_direction() -> None:
    e = {1: 0.96, 4: 0.70}
    t, bound = tfps_model.exchange(S, 4, 1, B, e)
    assert bound == tfps_model.PS_LINKS
    assert t == pytest.approx(4 * UNIT / 0.70)  # in from 4 workers at once


def test_where_the_workers_links_bound_it_pull_then_push_each_at_its_slower_side() -> None:
    e = {1: 0.96, 4: 0.70}
    t, bound = tfps_model.exchange(S, 4, 4, B, e)
    assert bound == tfps_model.WORKER_LINKS
    assert t == pytest.approx(max(UNIT / 0.70, UNIT / 0.96) + max(UNIT / 0.96, UNIT / 0.70))


def test_one_worker_reproduces_the_cells_it_was_measured_from() -> None:
    e = tfps_model.efficiencies(ONE_WORKER, B)
    for row in ONE_WORKER:
        t, _ = tfps_model.exchange(S, 1, int(row["k"]), B, e)
        assert t == pytest.approx(row["exchange_s"])


def test_at_k_1_with_every_link_at_full_rate_it_is_half_the_push_then_pull_model() -> None:
    t, _ = tfps_model.exchange(S, 4, 1, B, {1: 1.0, 4: 1.0})
    assert t == pytest.approx(costmodel.predict(PARAMS, "ps", S, 4, 1) / 2)


def test_an_unmeasured_fan_in_gives_no_model_and_bad_numbers_are_refused() -> None:
    assert tfps_model.exchange(S, 4, 2, B, {1: 0.96, 4: 0.7}) is None
    with pytest.raises(ValueError, match="must be positive"):
        tfps_model.exchange(S, 4, 0, B, {1: 0.96})


def test_annotate_adds_the_model_to_tf_ps_cells_of_two_workers_or_more_only() -> None:
    ring_row = {**_row(4, 0, 1.1, 1.1, strategy="horovod"), "t1_s": 0.02}
    rows = [*ONE_WORKER, _row(4, 1, 3.98, 3.58), _row(4, 4, 1.99, 2.0), ring_row]
    iso1, iso4, k1, k4, ring = strategies.annotate(rows, PARAMS)
    assert not any("tfps_step_s" in r for r in (iso1, iso4, ring))
    # T1: the ring cell's own (0.02, not the chief's 0.011), shared by every cell of N = 4
    assert k1["tfps_step_s"] == pytest.approx(0.02 + 4 * UNIT / 0.70)
    assert k4["tfps_over_measured"] == pytest.approx(k4["tfps_step_s"] / 1.99)
    # the one-worker cells are predicted by the push-then-pull model too: a pull and a push
    assert iso1["predicted_step_s"] == pytest.approx(0.011 + 2 * UNIT)


def test_without_the_one_worker_cells_nothing_is_added_and_nothing_rendered() -> None:
    out = strategies.annotate([_row(4, 1, 3.98, 3.58)], PARAMS)
    assert "tfps_step_s" not in out[0]
    assert tfps_model.render(out, B, 0.15) == []


def test_the_section_names_each_share_each_cell_and_how_many_are_within_tolerance() -> None:
    out = strategies.annotate([*ONE_WORKER, _row(4, 1, 3.98, 3.58), _row(4, 4, 2.61, 2.5)],
                              PARAMS)
    text = "\n".join(tfps_model.render(out, B, 0.15))
    assert "e(1) = 0.96, e(4) = 0.70" in text and "B = 25.0 MB/s" in text
    assert "| 4 | 1 | 3980.0 |" in text and tfps_model.PS_LINKS in text
    assert "within 15%: 1 of 2 cells (push-then-pull: 0 of 2)" in text
    assert "Not modelled" not in text


def test_cells_with_an_unmeasured_fan_in_are_named_not_dropped() -> None:
    out = strategies.annotate([*ONE_WORKER, _row(4, 1, 3.98, 3.58), _row(4, 2, 2.5, 2.7)],
                              PARAMS)
    text = "\n".join(tfps_model.render(out, B, 0.15))
    assert "within 15%: 1 of 1 cells" in text
    assert "Not modelled (1 cells: a fan-in with no one-worker cell): N=4 k=2." in text


def test_at_the_boundary_the_ps_links_win_and_just_inside_the_workers_do() -> None:
    e = {1: 1.0, 2: 1.0}
    # N = 2, k = 1: a ps link's busier direction (2 S/B) equals a worker's pull plus push
    assert tfps_model.exchange(S, 2, 1, B, e) == (pytest.approx(2 * UNIT), tfps_model.PS_LINKS)
    # N = 2, k = 2: the workers' links, in phase
    assert tfps_model.exchange(S, 2, 2, B, e) == (pytest.approx(2 * UNIT),
                                                  tfps_model.WORKER_LINKS)


def test_one_worker_runs_only_tf_ps_cells() -> None:
    cfg = strategies.StrategyBench(ns=(1, 2), ks=(1, 2))
    assert [c for c in cfg.cells() if c[0] == 1] == [(1, "tf-ps", 1), (1, "tf-ps", 2)]
    # every fan-in the model needs: k for a worker's pull, N for the pushes into a ps
    wide = strategies.StrategyBench(ns=(1, 4), ks=(2,))
    assert [c for c in wide.cells() if c[0] == 1] == [(1, "tf-ps", f) for f in (1, 2, 4)]
    rings = strategies.StrategyBench(ns=(1, 2), strategies=("horovod",))
    assert rings.cells() == [(2, "horovod", 0)]


def test_one_worker_cells_measure_and_are_not_a_verdict_on_strategies() -> None:
    rows = strategies.annotate([*ONE_WORKER, _row(2, 0, 0.7, 0.7, strategy="horovod"),
                                _row(2, 1, 1.9, 1.8)], PARAMS)
    assert not any("winner_measured" in r for r in rows if r["workers"] == 1)
    assert strategies.checks(rows) == [(2, "horovod", ["horovod"], True)]
