"""The simulated network: one namespace per host, a veth pair into a bridge, a private subnet.

Layout for cluster ``rt`` on 10.213.7.0/24::

    root namespace:  rt-br 10.213.7.1/24  (bridge; mpirun's side)
                       ├── rt-gpu01 ─── veth ─── eth0 10.213.7.11/24 in netns rt-gpu01
                       └── rt-gpu02 ─── veth ─── eth0 10.213.7.12/24 in netns rt-gpu02

Namespaces have ``lo`` and ``eth0`` only and no default route: nothing leaves the subnet.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from pathlib import Path

from ringtrain.errors import SimError
from ringtrain.sim.config import AUTO_SUBNETS, HOST_PREFIX, SimCluster, SimConfig
from ringtrain.sim.proc import run

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")


def netns_path(ns: str) -> Path:
    return NETNS_DIR / ns


def _member_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(name)}-(br|{HOST_PREFIX}\d{{2,}})$")


def existing_netns(name: str) -> list[str]:
    """This cluster's namespaces that exist now (found by name, not by state file)."""
    out = run(["ip", "-j", "netns", "list"]).stdout.strip()
    names = [e["name"] for e in json.loads(out or "[]")]
    pattern = _member_re(name)
    return sorted(n for n in names if pattern.match(n))


def existing_links(name: str) -> list[str]:
    """This cluster's bridge and root-side veth ends that exist now."""
    links = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    pattern = _member_re(name)
    return sorted(link["ifname"] for link in links if pattern.match(link["ifname"]))


def link_is_up(ifname: str) -> bool:
    done = run(["ip", "-j", "link", "show", "dev", ifname], check=False)
    if done.returncode != 0:
        return False
    links = json.loads(done.stdout or "[]")
    return bool(links) and "UP" in links[0].get("flags", [])


def _networks_in_use(ignore_dev: str) -> list[tuple[ipaddress.IPv4Network, str]]:
    """IPv4 networks of every route and address on this machine, except on ``ignore_dev``."""
    used: list[tuple[ipaddress.IPv4Network, str]] = []
    routes = run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout
    for route in json.loads(routes or "[]"):
        if route.get("dst") in (None, "default") or route.get("dev") == ignore_dev:
            continue
        used.append((ipaddress.IPv4Network(route["dst"], strict=False),
                     f"route {route['dst']} dev {route.get('dev', '?')}"))
    for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        if link.get("ifname") == ignore_dev:
            continue
        for addr in link.get("addr_info", []):
            net = ipaddress.IPv4Network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
            used.append((net, f"address {addr['local']}/{addr['prefixlen']} on {link['ifname']}"))
    return used


def subnet_conflict(subnet: str, own_bridge: str) -> str | None:
    """What on this machine overlaps ``subnet`` (ignoring our own bridge); None when it is free."""
    net = ipaddress.IPv4Network(subnet)
    for used, what in _networks_in_use(own_bridge):
        if net.overlaps(used):
            return what
    return None


def choose_subnet(cfg: SimConfig) -> str:
    for candidate in AUTO_SUBNETS:
        if subnet_conflict(candidate, cfg.bridge) is None:
            return candidate
    raise SimError("no free 10.213.X.0/24 subnet for the sim cluster",
                   hint="pass --subnet with a free private /24")


def require_free_subnet(cluster: SimCluster) -> None:
    conflict = subnet_conflict(cluster.subnet, cluster.bridge)
    if conflict:
        raise SimError(
            f"subnet {cluster.subnet} overlaps {conflict} on this machine",
            hint="pass another --subnet (or leave it out to pick a free one)",
        )


def create(cluster: SimCluster) -> None:
    """Bridge, namespaces, veth pairs and addresses: one ``ip -batch`` in the root namespace,
    one per host namespace."""
    prefix = ipaddress.IPv4Network(cluster.subnet).prefixlen
    root = [
        f"link add {cluster.bridge} type bridge",
        f"addr add {cluster.bridge_address}/{prefix} dev {cluster.bridge}",
        f"link set {cluster.bridge} up",
    ]
    for host in cluster.hosts:
        root += [
            f"netns add {host.netns}",
            f"link add {host.veth} type veth peer name eth0 netns {host.netns}",
            f"link set {host.veth} master {cluster.bridge}",
            f"link set {host.veth} up",
        ]
    run(["ip", "-batch", "-"], input="\n".join(root) + "\n")
    for host in cluster.hosts:
        inside = [
            f"addr add {host.address}/{prefix} dev eth0",
            "link set eth0 up",
            "link set lo up",
        ]
        run(["ip", "-n", host.netns, "-batch", "-"], input="\n".join(inside) + "\n")
    log.info("network %s: bridge %s, %d namespaces", cluster.subnet, cluster.bridge,
             len(cluster.hosts))


def delete(cfg: SimConfig) -> None:
    """Remove this cluster's links and namespaces, whatever state they are in.

    Root-side veth ends go first: deleting one removes its pair at once, where a deleted
    namespace frees its links asynchronously."""
    for link in existing_links(cfg.name):
        if link != cfg.bridge:
            run(["ip", "link", "del", link], check=False)
    if cfg.bridge in existing_links(cfg.name):
        run(["ip", "link", "del", cfg.bridge], check=False)
    for ns in existing_netns(cfg.name):
        run(["ip", "netns", "del", ns], check=False)


def set_link(ifname: str, up: bool) -> None:
    run(["ip", "link", "set", "dev", ifname, "up" if up else "down"])
