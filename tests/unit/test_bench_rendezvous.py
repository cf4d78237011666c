"""bench/launcher/rendezvous_scale's pure parts: what Gloo's full mesh asks of Horovod's
rendezvous server, and the kernel counter the benchmark reads."""

from __future__ import annotations

import pytest

from ringtrain.bench.launcher.rendezvous_clients import ADDRESS_BYTES, gloo_mesh_cost
from ringtrain.bench.launcher.rendezvous_scale import netstat_field


def test_the_full_mesh_counts_every_request_of_every_rank() -> None:
    # rank r: PUT rank_r, GET rank_i for i < r, PUT r, 2 GETs per peer, DELETE r
    for n in (1, 2, 3, 8, 64):
        requests, moved = gloo_mesh_cost(n)
        assert requests == sum(1 + r + 1 + 2 * (n - 1) + 1 for r in range(n))
        table = (n - 1) * ADDRESS_BYTES
        assert moved == n * table + n * 2 * (n - 1) * table


def test_the_full_mesh_is_quadratic_in_requests_and_cubic_in_bytes() -> None:
    r512, b512 = gloo_mesh_cost(512)
    r4096, b4096 = gloo_mesh_cost(4096)
    assert 60 < r4096 / r512 < 66  # 8x the workers: 64x the requests
    assert 500 < b4096 / b512 < 520  # ... and 512x the bytes
    assert 1.8e13 < b4096 < 1.9e13  # 4,096 workers: 18 TB through one HTTP server


NETSTAT = ("TcpExt: SyncookiesSent ListenOverflows ListenDrops\n"
           "TcpExt: 0 4969 4970\n"
           "IpExt: InNoRoutes ListenOverflows\n"
           "IpExt: 1 2\n")


def test_netstat_field_reads_the_tcpext_value_under_its_name() -> None:
    assert netstat_field(NETSTAT, "ListenOverflows") == 4969
    assert netstat_field(NETSTAT, "ListenDrops") == 4970
    with pytest.raises(KeyError, match="TcpExt NoSuch"):
        netstat_field(NETSTAT, "NoSuch")
