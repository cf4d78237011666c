"""The pre-flight gate of every attempt: probe the hosts, judge them, show the table, refuse or
trim the inventory, and find the address the control server binds to.

GPU rule (``LaunchSpec.preflight.gpus``): ``ignored`` (``--cpu``) says GPUs do not matter,
``required`` (``--gpus``) says they must be there; ``auto`` requires them unless no host has an
NVIDIA driver at all, which is a CPU cluster (this machine, CI, a laptop). ``ringtrain check``
applies the same rule, so it fails exactly when a launch would be refused.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import psutil

from ringtrain.hostfile import Inventory
from ringtrain.probe import baselines, names
from ringtrain.probe.hostprobe import probe
from ringtrain.probe.netif import NetworkChoice, choose_network
from ringtrain.probe.probe_parse import GpuStatus, ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict, evaluate
from ringtrain.probe.versiondiff import script_imports
from ringtrain.remote import Remote
from ringtrain.spec import Entry, GpuRule, LaunchSpec, Strategy

_NO_DRIVER = (GpuStatus.NOT_INSTALLED, GpuStatus.NO_GPUS)


class GateReporter(Protocol):
    """What the gate says: notes, and the pre-flight table before it is applied (the launch's
    Reporter is one)."""

    def note(self, text: str) -> None: ...

    def verdict(self, inventory: Inventory, report: ProbeReport, verdict: PreflightVerdict,
                policy: PreflightPolicy) -> None: ...


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the gate decided for one attempt: the usable hosts, the network for MPI traffic
    (``tcp_include``, extra variables such as NCCL_SOCKET_IFNAME) and the address of this
    machine that every host can reach (the control server binds there)."""

    inventory: Inventory
    tcp_include: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    control_host: str = "127.0.0.1"
    busy: frozenset[str] = frozenset()  # hosts whose GPUs were busy before the attempt
    # the doctor's findings: (host, code, GPU, measured, action), for result.json
    doctor: tuple[tuple[str, str, int | None, str, str], ...] = ()


def policy_for(spec: LaunchSpec, need: int | None) -> PreflightPolicy:
    """The pre-flight policy of an attempt that needs ``need`` slots (-np on a first attempt,
    the restart's floor on a later one), before the GPU rule is applied."""
    return PreflightPolicy(
        on_bad_host=spec.preflight.on_bad_host,
        doctor_actions=_doctor_actions(spec),
        min_hosts=spec.allocation.min_hosts,
        np=need,
        require_same_versions=spec.preflight.require_same_versions,
        network_interface=spec.network_interface,
        imported=_script_imports(spec),
    )


def _script_imports(spec: LaunchSpec) -> tuple[str, ...]:
    """TensorFlow or Horovod, when the script (a Python file) imports them: then no host having
    them refuses the launch rather than warning (versiondiff)."""
    if spec.entry is not Entry.SCRIPT or spec.strategy is not Strategy.HOROVOD:
        return ()
    path = spec.working_dir / spec.script
    try:
        with path.open("rb") as f:
            text = f.read(1 << 20).decode(errors="replace")
    except OSError:
        return ()
    return script_imports(text)


def _doctor_actions(spec: LaunchSpec) -> tuple[tuple[str, str], ...]:
    """--on-bad-host CODE=ACTION; Horovod's NCCL does not matter to TF's own strategies."""
    actions = dict(spec.preflight.doctor_actions)
    if spec.strategy is not Strategy.HOROVOD:
        actions.setdefault("hvd-no-nccl", "ignore")
    return tuple(sorted(actions.items()))


def run_gate(
    spec: LaunchSpec, inventory: Inventory, need: int | None, remote: Remote,
    reporter: GateReporter,
) -> Preflight:
    """Probe ``inventory`` and return what the attempt may use, or raise ProbeError."""
    if not spec.preflight.enabled:
        reporter.note("pre-flight probe skipped (--no-probe)")
        # --network-interface's names still reach NCCL and Gloo as with a probe (its CIDRs
        # need the probed interfaces to become names; Open MPI takes them as they are)
        net = choose_network({}, spec.network_interface) if spec.network_interface else None
        return Preflight(inventory, env=net.env if net is not None else (),
                         control_host=control_host(inventory, net, reporter.note))
    report = probe(inventory, remote, python=spec.python, timeout=spec.preflight.timeout_s)
    policy = gpu_rule(spec.preflight.gpus, report, policy_for(spec, need), reporter.note)
    verdict = evaluate_remembering(inventory, report, policy)
    reporter.verdict(inventory, report, verdict, policy)
    verdict.raise_if_refused()
    net = verdict.network
    return Preflight(
        inventory=verdict.apply(inventory),
        tcp_include=",".join(net.include) if net is not None and net.include else None,
        env=net.env if net is not None else (),
        control_host=control_host(inventory, net, reporter.note),
        busy=verdict.busy,
        doctor=tuple((h.host, j.finding.code, j.finding.gpu, j.finding.measured, j.action)
                     for h in verdict.hosts for j in h.findings),
    )


def evaluate_remembering(inventory: Inventory, report: ProbeReport,
                         policy: PreflightPolicy) -> PreflightVerdict:
    """``evaluate`` with the doctor's baselines (the last clean check of each host) read
    first, and what the clean hosts' doctor sections saw kept after, for "since the last
    check". The launch's gate, ``check`` and the elastic spare keeper all judge this way."""
    known = baselines.default_path()
    verdict = evaluate(inventory, report, dataclasses.replace(
        policy, baselines=tuple(baselines.load(known).items())))
    clean = verdict.clean_hosts()
    baselines.save(known, baselines.recordable(
        {r.host: (r.host in clean, r.health) for r in report.results}))
    return verdict


def gpu_rule(
    rule: GpuRule, report: ProbeReport, policy: PreflightPolicy, note: Callable[[str], None]
) -> PreflightPolicy:
    """``policy`` with ``require_gpus`` set by the GPU rule. Pure."""
    if rule is GpuRule.IGNORED:
        return dataclasses.replace(policy, require_gpus=False)
    if rule is GpuRule.AUTO and all(
        r.reachable and r.gpu.status in _NO_DRIVER for r in report.results
    ):
        note("no host has an NVIDIA driver: a CPU job (pass --gpus to require GPUs)")
        return dataclasses.replace(policy, require_gpus=False)
    return dataclasses.replace(policy, require_gpus=True)


def control_host(
    inventory: Inventory, net: NetworkChoice | None, note: Callable[[str], None]
) -> str:
    """An address of this machine that every host can reach, for the control server."""
    if inventory.is_local_only:
        return "127.0.0.1"
    if net is not None:
        found = local_address_in(net.include)
        if found is not None:
            return found
    # without the probe's network choice (--no-probe, the ring check's own job): the address
    # this machine's routes use towards the hosts; this machine's own name often resolves to
    # a loopback address (Debian's /etc/hosts), which no other host can reach
    remote = [h.name for h in inventory.hosts if not h.is_local]
    resolved = names.resolve(remote)  # already known: placement resolved them
    for name in remote:
        found = _route_source(resolved[name])
        if found is not None:
            return found
    own = names.this_host()
    for address in names.resolve([own])[own]:
        if ":" not in address and not ipaddress.ip_address(address).is_loopback:
            return address
    note(
        "warning: no address of this machine found that the hosts can reach; "
        "supervision may be degraded"
    )
    return "0.0.0.0"  # noqa: S104 - the token still guards the port


def _route_source(addresses: tuple[str, ...]) -> str | None:
    """The local IPv4 address the kernel picks to reach a host at ``addresses``."""
    for target in addresses:
        if ":" in target:
            continue
        address = names.route_source(target)
        # a loopback source is right only for a host that is itself a loopback address
        if address is not None and (not ipaddress.ip_address(address).is_loopback
                                    or ipaddress.ip_address(target).is_loopback):
            return address
    return None


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
