"""Network interface choice (netif.choose_network)."""

from __future__ import annotations

import pytest

from ringtrain.errors import UsageError
from ringtrain.probe.netif import choose_network
from ringtrain.probe.probe_parse import Interface


def ifs(*pairs: str) -> tuple[Interface, ...]:
    out = [Interface("lo", "127.0.0.1", 8, "host")]
    for pair in pairs:
        name, cidr = pair.split("=")
        addr, plen = cidr.split("/")
        out.append(Interface(name, addr, int(plen)))
    return tuple(out)


def test_docker0_is_not_a_shared_network() -> None:
    hosts = {"a": ifs("docker0=172.17.0.1/16", "eno1=10.0.0.1/24"),
             "b": ifs("docker0=172.17.0.1/16", "eno1=10.0.0.2/24")}
    c = choose_network(hosts)
    assert c.include == ("10.0.0.0/24",) and c.ifnames == ("eno1",)
    assert c.mca == (("btl_tcp_if_include", "10.0.0.0/24"), ("oob_tcp_if_include", "10.0.0.0/24"))
    assert c.env == (("NCCL_SOCKET_IFNAME", "eno1"), ("HOROVOD_GLOO_IFACE", "eno1"))
    assert c.per_host == (("a", "eno1"), ("b", "eno1")) and c.warning is None


def test_prefers_same_interface_name_and_skips_virtual_bridges() -> None:
    hosts = {"a": ifs("virbr0=10.9.0.1/24", "ens1=10.5.0.1/24", "eth0=10.0.0.1/24"),
             "b": ifs("virbr0=10.9.0.2/24", "ens2=10.5.0.2/24", "eth0=10.0.0.2/24")}
    assert choose_network(hosts).include == ("10.0.0.0/24",)


def test_differing_names_are_listed_for_nccl() -> None:
    hosts = {"a": ifs("ens1=10.5.0.1/24"), "b": ifs("enp3s0=10.5.0.2/24")}
    c = choose_network(hosts)
    assert c.ifnames == ("ens1", "enp3s0")
    assert c.env == (("NCCL_SOCKET_IFNAME", "ens1,enp3s0"),)


def test_no_common_subnet_warns() -> None:
    c = choose_network({"a": ifs("eth0=10.0.0.1/24"), "b": ifs("eth0=10.0.1.2/24")})
    assert c.include == () and c.mca == () and c.env == ()
    assert c.warning is not None and c.warning.startswith(
        "no IPv4 subnet is common to all hosts (a: 10.0.0.0/24, b: 10.0.1.0/24)")


def test_override_wins() -> None:
    hosts = {"a": ifs("eth0=10.0.0.1/24", "ib0=172.20.0.1/16"),
             "b": ifs("eth0=10.0.0.2/24", "ib0=172.20.0.2/16")}
    c = choose_network(hosts, "ib0")
    assert c.include == ("ib0",) and c.ifnames == ("ib0",) and c.reason == "--network-interface"
    c = choose_network(hosts, "172.20.0.0/16")
    assert c.include == ("172.20.0.0/16",) and c.ifnames == ("ib0",)
    c = choose_network(hosts, "eth9")  # refused, with what each host has
    assert c.problem == (
        "--network-interface eth9 matches no interface with an address on a, b "
        "(a: eth0 10.0.0.1, ib0 172.20.0.1; b: eth0 10.0.0.2, ib0 172.20.0.2)")
    c = choose_network({**hosts, "c": ifs("eth0=10.0.0.3/24")}, "ib0")
    assert c.problem is not None and c.problem.endswith("on c (c: eth0 10.0.0.3)")


@pytest.mark.parametrize("bad", ["eth0;id", "10.0.0.0/99", " , ", "$(x)"])
def test_bad_override(bad: str) -> None:
    with pytest.raises(UsageError):
        choose_network({"a": ifs("eth0=10.0.0.1/24")}, bad)
