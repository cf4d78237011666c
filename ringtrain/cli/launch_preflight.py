"""The pre-flight step of ``ringtrain launch``: probe, show the table, apply the verdict.

Runs before every attempt (so a restart re-probes). GPU requirement: ``--cpu`` says GPUs do not
matter, ``--gpus`` says they must be there; by default (auto) GPUs are required unless no host
has an NVIDIA driver at all, which is a CPU cluster (this machine, CI, a laptop).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

import click
import psutil

from ringtrain.hostfile import Inventory
from ringtrain.launch.netif import NetworkChoice
from ringtrain.launch.preflight import PreflightPolicy, PreflightVerdict, evaluate
from ringtrain.launch.probe import ProbeReport, probe
from ringtrain.launch.probe_parse import GpuStatus
from ringtrain.launch.remote import Remote
from ringtrain.launch.session import Preflight

_NO_DRIVER = (GpuStatus.NOT_INSTALLED, GpuStatus.NO_GPUS)


@dataclass(frozen=True, slots=True)
class PreflightOptions:
    enabled: bool = True
    gpus: str = "auto"  # auto | required | ignored
    policy: PreflightPolicy = dataclasses.field(default_factory=PreflightPolicy)
    python: str | None = None
    timeout: float = 30.0


ShowVerdict = Callable[[Inventory, ProbeReport, PreflightVerdict, PreflightPolicy], None]


def make_preflight(
    options: PreflightOptions, remote: Remote, show: ShowVerdict, note: Callable[[str], None]
) -> Callable[[Inventory, int | None], Preflight]:
    def preflight(inventory: Inventory, need: int | None) -> Preflight:
        if not options.enabled:
            note("pre-flight probe skipped (--no-probe)")
            return Preflight(inventory, control_host=control_host(inventory, None))
        # need: -np on a first attempt, the restart's floor (--min-np) on a later one
        report = probe(inventory, remote, python=options.python, timeout=options.timeout)
        policy = gpu_rule(options.gpus, report, dataclasses.replace(options.policy, np=need), note)
        verdict = evaluate(inventory, report, policy)
        show(inventory, report, verdict, policy)
        verdict.raise_if_refused()
        net = verdict.network
        return Preflight(
            inventory=verdict.apply(inventory),
            tcp_include=",".join(net.include) if net is not None and net.include else None,
            env=net.env if net is not None else (),
            control_host=control_host(inventory, net),
        )

    return preflight


def gpu_rule(
    gpus: str, report: ProbeReport, policy: PreflightPolicy, note: Callable[[str], None]
) -> PreflightPolicy:
    """GPUs required (``required``), ignored (``ignored``), or ``auto``: required unless no
    host has an NVIDIA driver at all (a CPU cluster). Shared by launch and check."""
    if gpus == "ignored":
        return dataclasses.replace(policy, require_gpus=False)
    if gpus == "auto" and all(r.reachable and r.gpu.status in _NO_DRIVER for r in report.results):
        note("no host has an NVIDIA driver: a CPU job (pass --gpus to require GPUs)")
        return dataclasses.replace(policy, require_gpus=False)
    return dataclasses.replace(policy, require_gpus=True)


def control_host(inventory: Inventory, net: NetworkChoice | None) -> str:
    """An address of this machine that every host can reach, for the control server."""
    if inventory.is_local_only:
        return "127.0.0.1"
    if net is not None:
        found = local_address_in(net.include)
        if found is not None:
            return found
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        click.echo(
            "ringtrain: warning: no address of this machine found that the hosts can "
            "reach; supervision may be degraded",
            err=True,
        )
        return "0.0.0.0"  # noqa: S104 - the token still guards the port


def local_address_in(include: tuple[str, ...]) -> str | None:
    nets = []
    for item in include:
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            continue  # an interface name rather than a CIDR
    names = set(include)
    for ifname, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(addr.address)
            if ifname in names or any(ip in n for n in nets):
                return addr.address
    return None
