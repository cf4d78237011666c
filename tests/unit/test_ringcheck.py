"""The ring check's pure parts: round-robin pairing and naming the slow host or link."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ringtrain.errors import UsageError
from ringtrain.remote import CmdResult
from ringtrain.ringcheck.intra import describe_intra, read_answer
from ringtrain.ringcheck.intraprog import parse_nccl_tests
from ringtrain.ringcheck.outliers import Pair, analyse, parse_link_rate
from ringtrain.ringcheck.schedule import rounds

GBIT = 1e9 / 8


@pytest.mark.parametrize("n", range(1, 18))
def test_every_pair_once_in_n_minus_1_rounds_of_disjoint_pairs(n: int) -> None:
    sched = rounds(n)
    assert len(sched) == (0 if n < 2 else n - 1 + n % 2)
    seen = [p for r in sched for p in r]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for r in sched:
        busy = [h for p in r for h in p]
        assert len(busy) == len(set(busy))  # nobody in two pairs of one round
        assert len(r) == n // 2


def _matrix(n: int, slow_host: int | None = None, slow_link: tuple[int, int] | None = None,
            fast: float = 4 * GBIT, slow: float = 1 * GBIT, jitter: float = 0.05) -> list[Pair]:
    pairs = []
    for k, (a, b) in enumerate(itertools.combinations(range(n), 2)):
        bw = fast * (1 + jitter * ((k * 7919) % 11 - 5) / 5)  # deterministic noise, +-5%
        if slow_host in (a, b) or slow_link == (a, b):
            bw = slow
        pairs.append(Pair(a, b, bw, 50e-6))
    return pairs


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_a_host_at_a_quarter_is_named_and_its_neighbours_are_not(n: int) -> None:
    hosts = tuple(f"gpu{i:02d}" for i in range(n))
    for culprit in range(n):
        v = analyse(hosts, _matrix(n, slow_host=culprit))
        assert v.slow_hosts == (hosts[culprit],) and not v.slow_links, v.describe()
        assert "slow host " + hosts[culprit] in v.describe()[0]


def test_a_slow_link_between_healthy_hosts_is_a_link() -> None:
    hosts = tuple(f"h{i}" for i in range(6))
    v = analyse(hosts, _matrix(6, slow_link=(1, 4)))
    assert v.slow_hosts == () and [(a, b) for a, b, _ in v.slow_links] == [("h1", "h4")]


def test_a_healthy_cluster_raises_no_alarm_and_two_hosts_blame_no_host() -> None:
    for n in (2, 3, 5, 8):
        assert analyse(tuple(map(str, range(n))), _matrix(n, jitter=0.3)).healthy
    two = analyse(("a", "b"), [Pair(0, 1, 1 * GBIT, 1e-4)], expect_Bps=25 * GBIT)
    assert two.slow_hosts == () and two.slow_links == (("a", "b", 1 * GBIT),)


def test_the_expected_rate_is_the_reference_when_given() -> None:
    hosts = ("a", "b", "c")
    everything_slow = [Pair(a, b, 1 * GBIT, 1e-4) for a, b in itertools.combinations(range(3), 2)]
    assert analyse(hosts, everything_slow).healthy  # against their own median
    v = analyse(hosts, everything_slow, expect_Bps=25 * GBIT)
    assert v.reference_kind == "expected" and set(v.slow_hosts) == {"a", "b", "c"}


@pytest.mark.parametrize(("text", "bps"), [("25gbit", 25e9 / 8), ("100Mbit/s", 100e6 / 8),
                                          ("3GB/s", 3e9), ("400mb", 50e6), ("1.5 gbps", 1.5e9 / 8)])
def test_link_rates_read_as_links_are_sold(text: str, bps: float) -> None:
    assert parse_link_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["fast", "25", "0gbit", "-1gbit"])
def test_a_bad_link_rate_says_how_to_write_one(text: str) -> None:
    with pytest.raises(UsageError, match="--expect-link"):
        parse_link_rate(text)


# nccl-tests' all_reduce_perf, its output's shape (header comments, one row per size: out-of-
# place then in-place time/algbw/busbw/#wrong, the bounds and average lines); numbers made up.
NCCL_TESTS_OUT = (Path(__file__).parent / "golden" / "ringcheck" /
                  "nccl_tests_all_reduce.txt").read_text()


def test_nccl_tests_output_is_read_and_wrong_results_are_flagged() -> None:
    got = parse_nccl_tests(NCCL_TESTS_OUT)
    assert got["avg_busbw_GBps"] == 223.805 and got["peak_busbw_GBps"] == 238.52
    assert len(got["rows"]) == 4 and not got["wrong"]
    srun = "\n".join(f" 0: {line}" for line in NCCL_TESTS_OUT.splitlines())  # srun -l prefix
    assert parse_nccl_tests(srun)["peak_busbw_GBps"] == 238.52
    bad = NCCL_TESTS_OUT.replace("238.70      0", "238.70      3")
    assert parse_nccl_tests(bad)["wrong"]
    bounds = NCCL_TESTS_OUT.replace("values : 0 OK", "values : 2 FAILED")
    assert parse_nccl_tests(bounds)["wrong"]
    with pytest.raises(ValueError, match="Avg bus bandwidth"):
        parse_nccl_tests(NCCL_TESTS_OUT.split("# Out of bounds")[0])


def test_a_real_nccl_tests_2_19_output_is_read() -> None:
    """nccl-tests 2.19.6 built against NCCL 2.28.3 on a real H200 (`all_reduce_perf -b 8 -e
    128M -f 4 -g 1 -c 1`, captured 2026-11-26): the newer header lines, a trailing space after
    the average, and one GPU, whose bus bandwidth is 0 (the ring factor 2(n-1)/n)."""
    text = (Path(__file__).parent / "golden" / "ringcheck" /
            "nccl_tests_2.19.6_h200_g1.txt").read_text()
    got = parse_nccl_tests(text)
    assert len(got["rows"]) == 13 and got["rows"][0]["bytes"] == 8
    assert got["rows"][-1]["bytes"] == 134217728 and not got["wrong"]
    assert got["avg_busbw_GBps"] == 0.0 and got["peak_busbw_GBps"] == 0.0
    bad = text.replace("424874    0.00       0", "424874    0.00       1")
    assert bad != text and parse_nccl_tests(bad)["wrong"]


def test_gpu_to_gpu_answers_say_what_was_measured_or_why_not() -> None:
    ok = CmdResult("gpu01", 0, 'noise\nRINGCHECK-INTRA {"status": "ok", "gpus": 4, '
                   '"avg_busbw_GBps": 223.8, "peak_busbw_GBps": 238.5, "wrong": false}\n', "",
                   None, 1.0)
    none = CmdResult("gpu02", 0, 'RINGCHECK-INTRA {"status": "no-tool", "gpus": 8, '
                     '"note": "all_reduce_perf (nccl-tests) is not on PATH"}\n', "", None, 1.0)
    broken = CmdResult("gpu03", 1, "", "Traceback ...\nModuleNotFoundError: ringtrain\n", None,
                       1.0)
    lines = describe_intra({r.host: read_answer(r) for r in (ok, none, broken)}
                           | {"gpu04": {"status": "one-gpu", "gpus": 1}})
    assert lines[0] == ("gpu01: 4 GPUs, NCCL all-reduce bus bandwidth 223.8 GB/s average, "
                        "238.5 GB/s at 256 MiB")
    assert lines[1].startswith("gpu02: 8 GPUs, GPU-to-GPU not measured: all_reduce_perf")
    assert lines[2] == ("gpu03: GPU-to-GPU not measured: exit 1: Traceback ... | "
                        "ModuleNotFoundError: ringtrain")
    assert len(lines) == 3  # one GPU: nothing between GPUs to say
