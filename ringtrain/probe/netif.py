"""Pick the network the ranks talk over. Pure: probed interfaces in, MCA values and env out.

Open MPI and NCCL each guess an interface on their own and guess badly on hosts with docker0,
a management network or IPoIB next to Ethernet (docker0 has the same 172.17.0.1 on every host,
so its subnet looks shared but is not). We pick one IPv4 subnet that every chosen host has,
preferring the same interface name everywhere, and hand it to Open MPI as a CIDR
(``btl_tcp_if_include`` / ``oob_tcp_if_include`` accept CIDRs) and to NCCL/Gloo by name.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringtrain.errors import UsageError
from ringtrain.probe.probe_parse import Interface

_VIRTUAL_PREFIXES = ("docker", "virbr", "br-", "cni", "flannel", "cali", "kube", "lxcbr",
                     "podman", "vxlan", "tailscale", "zt")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")
_LOOPBACK = "127.0.0.0/8"


@dataclass(frozen=True, slots=True)
class NetworkChoice:
    """``include``: CIDRs (or interface names, when the user named them) for Open MPI;
    ``ifnames``: interface names for NCCL_SOCKET_IFNAME; ``per_host``: host -> its interface."""

    include: tuple[str, ...]
    ifnames: tuple[str, ...]
    per_host: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    warning: str | None = None
    problem: str | None = None  # the launch cannot work: refuse it (a named interface missing)

    @property
    def mca(self) -> tuple[tuple[str, str], ...]:
        if not self.include:
            return ()
        value = ",".join(self.include)
        return (("btl_tcp_if_include", value), ("oob_tcp_if_include", value))

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        if not self.ifnames:
            return ()
        env = [("NCCL_SOCKET_IFNAME", ",".join(self.ifnames))]
        if len(self.ifnames) == 1:
            env.append(("HOROVOD_GLOO_IFACE", self.ifnames[0]))
        return tuple(env)


def choose_network(
    interfaces: Mapping[str, Sequence[Interface]],
    override: str | None = None,
    *,
    all_local: bool = False,
) -> NetworkChoice:
    """``interfaces``: host -> its probed interfaces, for the hosts that will run ranks."""
    if override:
        return _from_override(interfaces, override)
    if all_local:
        return NetworkChoice((_LOOPBACK,), ("lo",), tuple((h, "lo") for h in interfaces),
                             "all hosts are this machine: loopback")
    if not interfaces:
        return NetworkChoice((), (), reason="no hosts")
    by_subnet = _subnets(interfaces)
    hosts = tuple(interfaces)
    common = {net: members for net, members in by_subnet.items() if len(members) == len(hosts)}
    candidates = {n: m for n, m in common.items() if _distinct_addresses(m)}
    if not candidates:
        return NetworkChoice((), (), warning=_no_common_warning(hosts, common, by_subnet))
    order = list(by_subnet)
    best = min(candidates, key=lambda n: _rank(n, candidates[n], order))
    members = candidates[best]
    names = tuple(dict.fromkeys(members[h][0] for h in hosts))
    reason = f"subnet {best} is on every host" + (
        f" (interface {names[0]})" if len(names) == 1 else f" (interfaces {', '.join(names)})")
    return NetworkChoice((str(best),), names, tuple((h, members[h][0]) for h in hosts), reason)


_Members = dict[str, tuple[str, str]]  # host -> (ifname, address)


def _subnets(
    interfaces: Mapping[str, Sequence[Interface]],
) -> dict[ipaddress.IPv4Network, _Members]:
    found: dict[ipaddress.IPv4Network, _Members] = {}
    for host, ifaces in interfaces.items():
        for iface in ifaces:
            ip = iface.ip
            if ip.version != 4 or ip.is_loopback or ip.is_link_local or iface.scope == "host":
                continue
            found.setdefault(ip.network, {}).setdefault(host, (iface.name, iface.address))
    return found


def _distinct_addresses(members: _Members) -> bool:
    addresses = [addr for _, addr in members.values()]
    return len(set(addresses)) == len(addresses)


def _rank(net: ipaddress.IPv4Network, members: _Members,
          order: list[ipaddress.IPv4Network]) -> tuple[int, int, int]:
    names = {name for name, _ in members.values()}
    virtual = any(n.startswith(_VIRTUAL_PREFIXES) for n in names)
    return (int(virtual), int(len(names) > 1), order.index(net))


def _no_common_warning(hosts: Sequence[str], common: Mapping[ipaddress.IPv4Network, _Members],
                       by_subnet: Mapping[ipaddress.IPv4Network, _Members]) -> str:
    if common:
        return ("the only subnets common to all hosts have the same address on several hosts "
                "(like docker0): pass --network-interface with the real interface")
    seen = ", ".join(f"{h}: {', '.join(str(n) for n, m in by_subnet.items() if h in m) or '-'}"
                     for h in hosts)
    return (f"no IPv4 subnet is common to all hosts ({seen}); Open MPI and NCCL will guess: "
            "pass --network-interface")


def _from_override(interfaces: Mapping[str, Sequence[Interface]], override: str) -> NetworkChoice:
    items = [i.strip() for i in override.split(",") if i.strip()]
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    names: list[str] = []
    for item in items:
        if "/" in item:
            try:
                nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError as err:
                raise UsageError(f"--network-interface {item!r}: {err}",
                                 "give interface names (eth0) or subnets (10.0.0.0/24)") from err
        elif _IFNAME_RE.match(item):
            names.append(item)
        else:
            raise UsageError(f"--network-interface {item!r} is not an interface name or subnet",
                             "give interface names (eth0) or subnets (10.0.0.0/24)")
    if not items:
        raise UsageError("--network-interface is empty", "give e.g. eth0 or 10.0.0.0/24")
    per_host = tuple((h, _pick(ifaces, nets, names)) for h, ifaces in interfaces.items())
    missing = [h for h, name in per_host if not name]
    ifnames = tuple(dict.fromkeys(names + [n for _, n in per_host if n and nets]))
    problem = None
    if missing:  # mpirun would die at once with only "exit code 1": refuse, and show what is there
        seen = "; ".join(f"{h}: {_describe(interfaces[h])}" for h in missing)
        problem = (f"--network-interface {override} matches no interface with an address on "
                   f"{', '.join(missing)} ({seen})")
    return NetworkChoice(tuple(str(n) for n in nets) + tuple(names), ifnames,
                         tuple((h, n) for h, n in per_host if n), "--network-interface",
                         problem=problem)


def _describe(ifaces: Sequence[Interface]) -> str:
    shown = [f"{i.name} {i.address}" for i in ifaces if i.ip.version == 4 and not i.ip.is_loopback]
    return ", ".join(shown) or "no IPv4 interface"


def _pick(ifaces: Sequence[Interface], nets: Sequence[ipaddress.IPv4Network |
          ipaddress.IPv6Network], names: Sequence[str]) -> str:
    for iface in ifaces:
        if iface.name in names or any(iface.ip.ip in n for n in nets):
            return iface.name
    return ""
