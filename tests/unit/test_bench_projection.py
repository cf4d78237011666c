"""The GPU projection from public inputs (bench/model/gpu_projection.py, public_inputs.py,
gpu_report.py): all-reduce formulas on hand-computed cases, overlap from the layer order at
its limits, the parameter server, the sensitivity and the report; `bench project` with no
measured run."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.bench.model import costmodel, gpu_report, layer_costs, public_inputs
from ringtrain.bench.model import gpu_projection as gp
from ringtrain.cli import cli


def _cluster(**kw: float) -> gp.Cluster:
    base = dict(servers=2, gpus_per_server=2, net_Bps=1e9, net_lat_s=1e-5, intra_Bps=4e9,
                intra_lat_s=1e-6, call_lat_s=1e-4, fusion_bytes=64 * 2**20, cycle_s=0.005)
    return gp.Cluster(**{**base, **kw})  # type: ignore[arg-type]


def test_hierarchical_allreduce_by_hand() -> None:
    # intra: 2 (L-1) (a + S/(L B_intra)) = 2 (1e-6 + 0.1); inter: 2 (M-1) (a + S/(M B_net))
    # = 2 (1e-5 + 0.4); plus one call's latency
    assert gp.allreduce_s(_cluster(), 8e8) == pytest.approx(1e-4 + 0.200002 + 0.80002)


def test_flat_ring_by_hand_and_one_server() -> None:
    flat = _cluster(hierarchical=False)
    # 2(N-M) intra steps, 2(M-1) network steps, 2(N-1)/N S / min(B)
    assert gp.allreduce_s(flat, 8e8) == pytest.approx(1e-4 + 4e-6 + 2e-5 + 1.2)
    one = _cluster(servers=1, gpus_per_server=4)
    assert gp.allreduce_s(one, 8e8) == pytest.approx(1e-4 + 6 * (1e-6 + 8e8 / 16e9))
    assert gp.allreduce_s(_cluster(servers=1, gpus_per_server=1), 8e8) == 0.0


def test_one_gpu_per_server_is_the_textbook_ring() -> None:
    c = _cluster(servers=8, gpus_per_server=1, call_lat_s=0.0)
    ring = costmodel.ring_time(costmodel.Params(a=1e-5, B=1e9, g=0.0), 1e8, 8)
    assert gp.allreduce_s(c, 1e8) == pytest.approx(ring)


def test_gradients_ready_back_to_front_by_flops() -> None:
    w = gp.Workload("m", units=((10.0, 1.0), (20.0, 1.0)), step_s=1.0)
    # forward 2 FLOPs, backward 2 (last layer) + 1 (first: no input gradient) = 5 in all
    assert gp.ready_times(w, 2.0) == [pytest.approx((0.8, 20.0)), pytest.approx((1.0, 10.0))]


def test_fusion_buffers() -> None:
    assert gp._fused([30.0, 30.0, 30.0], 64.0) == [60.0, 30.0]
    assert gp._fused([100.0, 10.0], 64.0) == [100.0, 10.0]  # larger than the buffer: alone


def test_a_tensor_waits_for_the_next_cycle() -> None:
    c = _cluster(cycle_s=0.005)
    end, calls = gp.horovod_cycles([(0.0012, 1.0)], c, lambda b: 0.001)
    assert calls == 1 and end == pytest.approx(0.005 + gp.negotiate_s(c) + 0.001)


WORK = public_inputs.workload("resnet101")


def test_all_communication_hidden_on_an_infinitely_fast_network() -> None:
    c = _cluster(servers=128, gpus_per_server=4, net_Bps=math.inf, intra_Bps=math.inf,
                 net_lat_s=0.0, intra_lat_s=0.0, call_lat_s=0.0, cycle_s=1e-7)
    p = gp.predict(WORK, c)
    assert p.efficiency == pytest.approx(1.0, abs=1e-6)


def test_nothing_hidden_when_the_backward_pass_is_instant() -> None:
    c = replace(public_inputs.cluster(512), bwd_per_fwd=0.0)
    w = replace(WORK, step_s=1.0)  # a whole number of 5 ms cycles: no wait for a tick
    p = gp.predict(w, c)
    assert p.efficiency == pytest.approx(p.efficiency_no_overlap, rel=1e-9)
    assert p.efficiency < gp.predict(w, public_inputs.cluster(512)).efficiency


def test_parameter_server_by_hand() -> None:
    c = _cluster(servers=2, gpus_per_server=1, net_lat_s=0.0)
    w = gp.Workload("m", units=((1e9, 1.0),), step_s=1.0)
    # k = 1: each byte costs max(1, N/k)/B = 2 ns: push 2 s after the step, then pull 2 s
    assert gp.predict_ps(w, c, 1).efficiency == pytest.approx(1 / 5)
    assert gp.predict_ps(w, c, 2).efficiency == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least one shard"):
        gp.predict_ps(w, c, 0)


def test_sensitivity_orders_inputs_by_their_effect() -> None:
    w, c = public_inputs.workload("vgg16"), public_inputs.cluster(512)
    sens = gp.sensitivity(w, c)
    assert sorted(s.name for s in sens) == sorted(gp.SENSITIVE)
    assert [s.spread for s in sens] == sorted((s.spread for s in sens), reverse=True)
    top = {s.name: s for s in sens}
    # a slower GPU hides more communication; a faster network exposes less
    assert top["step_s"].high > top["step_s"].low and top["net_Bps"].high > top["net_Bps"].low
    with pytest.raises(ValueError, match="unknown input"):
        gp.scaled(w, c, "colour", 1.1)


def test_public_inputs_are_consistent() -> None:
    assert 91.8 < public_inputs.images_per_s("resnet101") < 219.0
    for model, (_, trainable, flops, _) in layer_costs.TOTALS.items():
        if model in layer_costs.UNITS:
            units = layer_costs.UNITS[model]
            assert sum(p for _, p, _ in units) == trainable
            assert sum(f for _, _, f in units) == flops
    # tf.keras.applications' documented parameter counts
    counts = {m: t[0] for m, t in layer_costs.TOTALS.items()}
    assert counts["vgg16"] == 138_357_544 and counts["resnet101"] == 44_707_176
    assert counts["inception3"] == 23_851_784
    keys = {s.key for s in public_inputs.SOURCES}
    assert set(public_inputs.PUBLISHED_SOURCE.values()) <= keys


REPORT = gpu_report.build()


def test_report_rows_verdicts_and_ranges() -> None:
    assert len(REPORT.rows) == 6
    for r in REPORT.rows:
        eff = r.prediction.efficiency
        assert r.low - 1e-9 <= eff <= r.high + 1e-9
        assert r.met == (abs(eff - r.published) <= 0.05)
        assert min(r.ps.values()) <= max(r.ps.values()) <= 1.0
    text = gpu_report.render(REPORT)
    assert "Predicted vs published" in text and "Moves it most" in text
    assert all(s.url in text for s in public_inputs.SOURCES)
    json.dumps(REPORT.as_dict())


def test_bench_project_needs_no_measured_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["bench", "project"])
    assert result.exit_code == 0, result.output
    assert "Predicted vs published" in result.output and "VGG-16" in result.output
    result = CliRunner().invoke(cli, ["bench", "project", "--json", "--ps", "64,128",
                                      "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["measured"] is None and set(doc["rows"][0]["ps"]) == {"64", "128"}
    assert (tmp_path / "p.png").stat().st_size > 0


def test_bench_project_train_needs_run() -> None:
    result = CliRunner().invoke(cli, ["bench", "project", "--images-per-sec", "100"])
    assert result.exit_code != 0 and "--run" in result.output


@pytest.mark.slow
def test_layer_costs_match_keras() -> None:
    pytest.importorskip("tensorflow")
    from ringtrain.bench.model import layer_costs_gen

    assert layer_costs_gen.main(["--check"]) == 0
