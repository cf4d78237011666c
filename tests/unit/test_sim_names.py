"""Sim host names are unique per cluster, and the /etc/hosts block names each once (pure)."""

from __future__ import annotations

import pytest

from ringtrain.errors import SimError
from ringtrain.sim import etc_hosts
from ringtrain.sim.config import SimConfig


def test_the_default_cluster_keeps_short_names_and_any_other_is_prefixed() -> None:
    assert SimConfig(hosts=2).host_names == ("gpu01", "gpu02")
    assert SimConfig(name="t4194304", hosts=2).host_names == ("t4194304-gpu01", "t4194304-gpu02")


def test_two_clusters_never_share_a_host_name() -> None:
    names = [SimConfig(name=n, hosts=99).host_names for n in ("rt", "rt2", "t1", "t12")]
    flat = [h for hosts in names for h in hosts]
    assert len(flat) == len(set(flat)) == 4 * 99


def test_namespace_and_link_names_fit_the_kernel_limit_whatever_the_host_is_called() -> None:
    cfg = SimConfig(name="t4194304", hosts=99)
    last = cfg.host_names[-1]
    assert cfg.netns(last) == cfg.veth(last) == "t4194304-gpu99"
    assert all(len(cfg.netns(h)) <= 15 for h in cfg.host_names)
    assert SimConfig(hosts=1).netns("gpu01") == "rt-gpu01"


def test_a_host_the_cluster_lacks_is_named_in_the_error() -> None:
    with pytest.raises(SimError, match=r"no host 'gpu01'") as err:
        SimConfig(name="t2", hosts=2).netns("gpu01")
    assert "t2-gpu01, t2-gpu02" in (err.value.hint or "")


HOSTS = "127.0.0.1\tlocalhost\n10.0.0.5 gpu01 # a real one\n"


def test_blocks_of_two_clusters_name_disjoint_hosts() -> None:
    a, b = SimConfig(hosts=2), SimConfig(name="t2", hosts=2)
    text = etc_hosts.with_block(HOSTS, a.name, dict.fromkeys(a.host_names, "10.213.7.11"))
    text = etc_hosts.with_block(text, b.name, dict.fromkeys(b.host_names, "10.213.8.11"))
    assert etc_hosts.shadowing(text, b.name, dict.fromkeys(b.host_names, "x")) == []
    assert etc_hosts.strip_block(etc_hosts.strip_block(text, "rt"), "t2") == HOSTS


def test_a_line_outside_the_block_naming_a_sim_host_is_found() -> None:
    entries = {"gpu01": "10.213.7.11", "gpu02": "10.213.7.12"}
    text = etc_hosts.with_block(HOSTS, "rt", entries)
    assert etc_hosts.shadowing(text, "rt", entries) == [(2, "10.0.0.5 gpu01 # a real one")]
    assert etc_hosts.shadowing(HOSTS.replace("gpu01 #", "x # gpu01"), "rt", entries) == []
