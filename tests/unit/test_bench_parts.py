"""Pure pieces of ringtrain bench: argument parsing, mpirun argv, PS chunking and aggregation,
RDMA detection, link-rate parsing, the Gloo rank environment, the projection."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from ringtrain.bench import units
from ringtrain.bench.allreduce import gloo_rdzv, harness, rdma
from ringtrain.bench.allreduce.ps_grpc import Shard, pack
from ringtrain.bench.allreduce.ps_runner import split
from ringtrain.bench.model import projection
from ringtrain.bench.model.costmodel import Params
from ringtrain.errors import SimError, UsageError
from ringtrain.sim import shaping


def test_sizes_default_sweep_is_4k_to_256m_times_4() -> None:
    sizes = units.parse_sizes("4K..256M")
    assert sizes[0] == 4096 and sizes[-1] == 256 << 20 and len(sizes) == 9
    assert all(b == 4 * a for a, b in itertools.pairwise(sizes))
    assert units.parse_sizes("64M,4K") == (4096, 64 << 20)
    with pytest.raises(UsageError):
        units.parse_sizes("3")  # not float32-sized
    with pytest.raises(UsageError):
        units.parse_sizes("1M..4K")


def test_int_lists() -> None:
    assert units.parse_ints("2..4", "-n") == (2, 3, 4)
    assert units.parse_ints("8,2", "-n") == (2, 8)
    with pytest.raises(UsageError):
        units.parse_ints("1", "-n", lo=2)
    with pytest.raises(UsageError):
        units.parse_ints("two", "-n")


def test_local_mpirun_argv_forces_the_ring_and_oversubscribes() -> None:
    job = harness.Job("m", ("--x",), 8, env=(("GLIBC_TUNABLES", "v"),))
    argv = harness.mpirun_argv(harness.Target("local", cores=2), job, python="py")
    assert argv[0] == "mpirun" and "--oversubscribe" in argv
    assert argv[argv.index("coll_tuned_allreduce_algorithm") + 1] == "4"
    assert argv[argv.index("GLIBC_TUNABLES") - 1] == "-x"
    assert "v" not in argv  # values travel by environment, not argv
    assert argv[-6:] == ["py", "-m", "mpi4py", "-m", "m", "--x"]


def test_the_target_ab_experiment_binds_only_when_asked_and_counts_the_goal() -> None:
    from ringtrain.bench.allreduce.target_ab import summary

    job = harness.Job("m", (), 2)
    local = harness.Target("local", cores=2)
    plain = harness.mpirun_argv(local, job, python="py")
    assert plain[plain.index("-bind-to") + 1] == "none"  # bench compare's procedure
    bound = harness.mpirun_argv(local, harness.Job("m", (), 2, bind="core"), python="py")
    assert bound[bound.index("-bind-to") + 1] == "core"
    assert summary("default", [0.9, 0.95, 1.2, 0.6]) == {
        "variant": "default", "ratios": [0.9, 0.95, 1.2, 0.6], "met": 2, "of": 4}


def test_sim_mpirun_argv_places_one_rank_per_host() -> None:
    target = harness.Target("sim", addresses=("10.0.0.11", "10.0.0.12", "10.0.0.13"),
                            mca=("--mca", "plm_rsh_agent", "ssh -F cfg"))
    job = harness.Job("m", (), 2, hosts=(2, 0), mpi_ring=False)
    argv = harness.mpirun_argv(target, job, python="py")
    assert argv[argv.index("-H") + 1] == "10.0.0.13:1,10.0.0.11:1"
    assert "ssh -F cfg" in argv and "coll_tuned_allreduce_algorithm" not in argv
    with pytest.raises(Exception, match="hosts placed"):
        harness.mpirun_argv(target, harness.Job("m", (), 3, hosts=(0,)), python="py")


def test_result_lines_are_found_among_rank_output() -> None:
    out = "noise\n[1,0]<stdout>:RESULT {\"a\": 1}\nRESULT {\"b\": 2}\n"
    assert harness.parse_results(out) == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize(("total", "parts", "chunk"), [(1000, 3, 400), (262144, 2, 1 << 20),
                                                       (7, 4, 4), (1 << 20, 1, 1 << 20)])
def test_split_covers_the_buffer_in_bounded_chunks(total: int, parts: int, chunk: int) -> None:
    ranges = split(total, parts, chunk)
    assert len(ranges) == parts
    flat = [r for shard in ranges for r in shard]
    assert flat[0][0] == 0 and flat[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(flat))
    assert all(0 < (hi - lo) * 4 <= chunk for lo, hi in flat)


def test_shard_sums_every_worker_and_frees_entries() -> None:
    async def scenario() -> list[bytes]:
        shard = Shard(workers=3)
        data = [np.full(4, float(w + 1), dtype=np.float32).tobytes() for w in range(3)]
        pulls = [asyncio.ensure_future(shard.pull(pack(1, w, 0))) for w in range(3)]
        await asyncio.sleep(0)
        assert not any(p.done() for p in pulls)  # a pull waits for all pushes
        for w in range(3):
            shard.push(pack(1, w, 0, data[w]))
        out = await asyncio.gather(*pulls)
        assert shard.entries == {}
        return list(out)

    for reply in asyncio.run(scenario()):
        assert np.frombuffer(reply, dtype=np.float32).tolist() == [6.0] * 4


def test_rdma_absent_gives_a_reason_and_no_number(tmp_path: Path) -> None:
    info = rdma.detect(tmp_path / "no-infiniband")
    assert not info.available
    assert info.summary.startswith("not available on this machine (no verbs devices")


def test_rdma_present_needs_an_active_port_and_an_rdma_transport(tmp_path: Path) -> None:
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("Ethernet\n")
    ports = rdma.verbs_ports(tmp_path)
    assert ports == (rdma.Port("mlx5_0", "1", "4: ACTIVE", "Ethernet"),)
    text = "#      Transport: tcp\n#      Transport: rc_verbs\n#      Transport: tcp\n"
    assert rdma.parse_ucx_transports(text) == ("tcp", "rc_verbs")
    info = rdma.RdmaInfo(ports, ("tcp", "rc_verbs"), "/usr/bin/ucx_info", "ok")
    assert info.available and "mlx5_0:1 (Ethernet)" in info.summary


def test_link_rates() -> None:
    assert shaping.parse_rate("400mbit") == 400_000_000
    assert shaping.parse_rate("1.5Gbit") == 1_500_000_000
    with pytest.raises(SimError):
        shaping.parse_rate("400mb")
    args = shaping.tbf_args(400_000_000)
    assert args[:3] == ["tbf", "rate", "400000000bit"]
    assert int(args[args.index("burst") + 1]) >= shaping.MIN_BURST


def test_gloo_rank_environment_from_open_mpi() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "RINGTRAIN_GLOO_PER_HOST": "1"}
    out = gloo_rdzv.rank_env_from_ompi(env)
    assert out["HOROVOD_CROSS_RANK"] == "3" and out["HOROVOD_LOCAL_RANK"] == "0"
    assert out["HOROVOD_HOSTNAME"] == "node3" and out["HOROVOD_CROSS_SIZE"] == "4"
    local = gloo_rdzv.rank_env_from_ompi({"OMPI_COMM_WORLD_RANK": "1",
                                          "OMPI_COMM_WORLD_SIZE": "2",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert local["HOROVOD_LOCAL_RANK"] == "1" and local["HOROVOD_HOSTNAME"] == "node0"
    assert gloo_rdzv.plan_hosts(4, 2) == "node0:2,node1:2"


def test_projection_arithmetic() -> None:
    fit = Params(a=0.0, B=1.0, g=0.0)
    setup = projection.Setup("t", workers=4, servers=4, link_Bps=1e9, published={"m": 0.5})
    p = projection.project(fit, setup, "m", step_time_s=1.5, params=250_000_000, goodput=1.0,
                           overlap=0.0)
    # S = 1e9 bytes; ring 2(N-1)/N S/B = 1.5 s; efficiency 1.5/(1.5+1.5)
    assert p.comm_s == pytest.approx(1.5)
    assert p.efficiency_no_overlap == pytest.approx(0.5)
    assert p.needed_step_time_s == pytest.approx(1.5)
    hidden = projection.project(fit, setup, "m", 1.5, params=250_000_000, goodput=1.0,
                                overlap=1.0)
    assert hidden.efficiency_overlap == 1.0
    calls = projection.comm_time(Params(1e-3, 1e12, 0.0), setup, 100 * 2**20,
                                 fusion_bytes=64 * 2**20, goodput=1.0)
    assert calls == pytest.approx(2 * 6 * 1e-3 + 1.5 * 100 * 2**20 / 1e9, rel=1e-6)
    assert math.isclose(projection.HOROVOD_DOCS.link_Bps, 25e9 / 8)


def test_the_scale_run_measures_supervision_at_what_the_descriptor_limit_holds() -> None:
    from ringtrain.bench.launcher.scale import supervised_ranks

    assert supervised_ranks(8000, 20000) == 8000
    assert supervised_ranks(80000, 20000) == 19000  # this machine's hard limit
    assert supervised_ranks(80000, 1048576) == 80000
    assert supervised_ranks(80000, 100) == 0
