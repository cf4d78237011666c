"""Pre-flight policies: a ProbeReport and a policy in, a verdict out. Pure.

Every host gets a status (ok / warn / excluded / failed) with its problems phrased as fixes, and
the slots it can still offer. Version checks list only the hosts that differ from the majority
("gpu04: horovod 0.27.0 (others 0.28.1)"), never a dump of every host.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ringtrain.errors import ProbeError
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.doctor import Baseline, Finding
from ringtrain.probe.doctor_parse import ComputeApp
from ringtrain.probe.doctor_policy import BadHostPolicy, Judged, judge
from ringtrain.probe.netif import NetworkChoice, choose_network
from ringtrain.probe.probe_parse import Gpu, GpuStatus, ProbeReport, ProbeResult
from ringtrain.probe.versiondiff import launcher_diff, version_diff
from ringtrain.rank.events import PROTOCOL
from ringtrain.version import __version__


@dataclass(frozen=True, slots=True)
class PreflightPolicy:
    on_bad_host: Literal["fail", "exclude"] = "fail"
    min_hosts: int = 1
    np: int | None = None
    busy_memory_mib: int = 1024
    busy_util_pct: int = 10
    on_busy: Literal["warn", "exclude"] = "warn"
    require_same_versions: bool = True
    require_gpus: bool = True  # False (--cpu): GPU count and nvidia-smi do not matter
    network_interface: str | None = None
    doctor: bool = True  # the GPU and NIC doctor's findings count (doctor.py)
    doctor_actions: tuple[tuple[str, str], ...] = ()  # --on-bad-host CODE=ACTION
    run_id: str | None = None  # this run: its own ranks on a host are not "another job"
    baselines: tuple[tuple[str, Baseline], ...] = ()  # host -> what its last check saw
    imported: tuple[str, ...] = ()  # what the script imports (versiondiff.script_imports)
    ringtrain: tuple[str, int] = (__version__, PROTOCOL)  # the launcher's own: every host's

    @property
    def bad_host(self) -> BadHostPolicy:
        return BadHostPolicy(self.on_bad_host, self.doctor_actions)  # type: ignore[arg-type]


class HostStatus(enum.Enum):
    OK = "ok"
    WARN = "warn"
    EXCLUDED = "excluded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HostVerdict:
    host: str
    status: HostStatus
    slots_asked: int
    slots_usable: int
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    findings: tuple[Judged, ...] = ()  # the doctor's, each with the action taken

    @property
    def usable(self) -> bool:
        return self.status in (HostStatus.OK, HostStatus.WARN)


@dataclass(frozen=True, slots=True)
class PreflightVerdict:
    hosts: tuple[HostVerdict, ...]
    problems: tuple[str, ...] = ()  # job-level: too few hosts or slots left
    warnings: tuple[str, ...] = ()  # job-level: mixed GPU models, driver versions, network
    network: NetworkChoice | None = None
    busy: frozenset[str] = frozenset()  # hosts with a busy GPU (warned, or excluded)

    @property
    def refused(self) -> bool:
        return bool(self.problems) or any(h.status is HostStatus.FAILED for h in self.hosts)

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(h.host for h in self.hosts if h.status is HostStatus.EXCLUDED)

    @property
    def usable_slots(self) -> tuple[tuple[str, int], ...]:
        return tuple((h.host, h.slots_usable) for h in self.hosts if h.usable)

    def clean_hosts(self) -> frozenset[str]:
        """Hosts the doctor found nothing fatal on (their checks may become baselines)."""
        return frozenset(h.host for h in self.hosts if h.usable and not any(
            j.action in ("fail", "exclude") for j in h.findings))

    def host(self, name: str) -> HostVerdict:
        for h in self.hosts:
            if h.host == name:
                return h
        raise KeyError(name)

    def apply(self, inventory: Inventory) -> Inventory:
        """The inventory without excluded hosts, each with its usable slots (-> allocate)."""
        usable = dict(self.usable_slots)
        kept = tuple(h.with_slots(usable[h.name]) for h in inventory.hosts if h.name in usable)
        return replace(inventory, hosts=kept)

    def error(self) -> ProbeError | None:
        if not self.refused:
            return None
        lines = [f"{h.host}: {p}" for h in self.hosts if h.status is HostStatus.FAILED
                 for p in h.problems]
        lines += list(self.problems)
        bad = sum(h.status is HostStatus.FAILED for h in self.hosts)
        head = (f"pre-flight refused the launch: {bad} of {len(self.hosts)} hosts have problems"
                if bad else "pre-flight refused the launch")
        hint = ("fix the hosts listed, or pass --on-bad-host exclude to run without them"
                if bad else "add hosts or slots, or lower -np / --min-hosts")
        return ProbeError(head + "\n  " + "\n  ".join(lines), hint)

    def raise_if_refused(self) -> None:
        err = self.error()
        if err is not None:
            raise err


def evaluate(inventory: Inventory, report: ProbeReport,
             policy: PreflightPolicy = PreflightPolicy()) -> PreflightVerdict:
    """Apply ``policy`` to what the probe saw on each host of ``inventory``."""
    results = {r.host: r for r in report.results}
    problems: dict[str, list[str]] = {h.name: [] for h in inventory.hosts}
    warnings: dict[str, list[str]] = {h.name: [] for h in inventory.hosts}
    busy: set[str] = set()
    said_before: dict[str, list[Judged]] = {h.name: [] for h in inventory.hosts}
    for host in inventory.hosts:
        result = results.get(host.name) or ProbeResult(host.name, False, "not probed")
        problems[host.name] += _host_problems(host, result, policy)
        said_before[host.name] += _count_finding(host, result, policy)
        busy_now = _busy_gpus(host, result, policy)
        if busy_now:
            busy.add(host.name)
            warnings[host.name] += [f"GPU {i} busy ({said}): another job may be running"
                                    for i, said in busy_now]
            said_before[host.name] += [Judged(
                Finding("gpu-busy", i, said, "no other job's memory or process"),
                "exclude" if policy.on_busy == "exclude" else "warn", said=True)
                for i, said in busy_now]
        warnings[host.name] += _gpu_health_notes(host, result, policy)  # after busy: see verdict
    reachable = [results[h.name] for h in inventory.hosts
                 if h.name in results and results[h.name].reachable]
    _add(problems, _duplicate_hostnames(reachable))
    version_problems, version_warnings, job_warnings, missing = version_diff(
        reachable, policy.imported)
    _add(warnings, version_warnings)
    _add(problems if policy.require_same_versions else warnings, version_problems)
    ours_refused, ours_differ = launcher_diff(reachable, policy.ringtrain)
    _add(problems, ours_refused)
    _add(warnings, ours_differ)
    judged = _doctor(inventory, results, reachable, policy)
    verdicts = tuple(_host_verdict(h, problems[h.name], warnings[h.name], h.name in busy, policy,
                                   (*said_before[h.name], *judged.get(h.name, ())))
                     for h in inventory.hosts)
    usable = [results[v.host] for v in verdicts if v.usable]
    by_name = {h.name: h for h in inventory.hosts}  # one lookup table, not a scan per host
    job_warnings += _gpu_warnings(usable, by_name) if policy.require_gpus else []
    network = choose_network({r.host: r.interfaces for r in usable}, policy.network_interface,
                             all_local=bool(usable) and all(
                                 by_name[r.host].is_local for r in usable))
    if network.warning:
        job_warnings.append(network.warning)
    job_problems = [*_job_problems(verdicts, policy), *([network.problem] if network.problem
                                                          else []), *missing]
    return PreflightVerdict(verdicts, tuple(job_problems), tuple(job_warnings), network,
                            frozenset(busy))


def _host_problems(host: Host, r: ProbeResult, policy: PreflightPolicy) -> list[str]:
    if not r.reachable:
        return [f"unreachable: {r.error}"]
    out = [r.error] if r.error else []
    if r.versions.error:
        out.append(r.versions.error)
    if policy.require_gpus:
        out += _gpu_problems(host, r)
    return out


def _count_finding(host: Host, r: ProbeResult, policy: PreflightPolicy) -> list[Judged]:
    """The GPU count as a doctor finding (its words are already among the problems)."""
    healthy = len(r.gpu.healthy)
    if not (policy.require_gpus and r.reachable and healthy < host.slots):
        return []
    seen = f"{healthy} healthy GPUs" + (f" ({r.gpu.message})" if r.gpu.message else "")
    return [Judged(Finding("gpu-count", None, seen, f"{host.slots}"), policy.on_bad_host,
                   said=True)]


def _gpu_problems(host: Host, r: ProbeResult) -> list[str]:
    q = r.gpu
    cpu_fix = "or pass --cpu for a CPU-only job"
    if q.status is GpuStatus.NOT_INSTALLED:
        return [f"nvidia-smi not found: install the NVIDIA driver on {host.name} {cpu_fix}"]
    if q.status is GpuStatus.NO_GPUS:
        return [f"expected {host.slots} GPUs, nvidia-smi saw none ({q.message}); {cpu_fix}"]
    if q.status is GpuStatus.FAILED:
        return [f"{q.message}; run nvidia-smi on {host.name} and fix the driver"]
    if q.status is GpuStatus.NOT_PROBED:
        return ["GPUs were not probed"]
    out = []
    healthy, sick = q.healthy, [g for g in q.gpus if not g.ok]
    if len(healthy) < host.slots:
        detail = "".join(f"; GPU {g.index}: {g.problem}" for g in sick)
        said = f"; nvidia-smi: {q.message}" if q.message else ""
        out.append(f"expected {host.slots} GPUs, nvidia-smi saw {len(healthy)}"
                   f"{' healthy' if sick or q.lost else ''}{detail}{said}")
    return out


def _gpu_health_notes(host: Host, r: ProbeResult, policy: PreflightPolicy) -> list[str]:
    """Warnings for a host whose healthy GPUs still cover its slots while nvidia-smi reported
    trouble beside them: a GPU it could not read (fallen off the bus, exit 0 all the same), a
    field it printed as an error, or other lines among the rows. Its own words are kept."""
    q = r.gpu
    if not (r.reachable and policy.require_gpus and q.status is GpuStatus.OK):
        return []
    healthy = len(q.healthy)
    if healthy < host.slots:
        return []  # already a problem, with the same words (_gpu_problems)
    enough = f"{healthy} healthy GPUs still cover the {host.slots} slots"
    out = [f"GPU {g.index} unhealthy ({g.problem}); {enough}" for g in q.gpus if not g.ok]
    if q.lost:
        n = len(q.lost)
        out.append(f"nvidia-smi could not read {n} GPU{'s' * (n != 1)} ({enough}); "
                   f"nvidia-smi: {q.message}")
    elif q.message:
        out.append(f"nvidia-smi printed more than GPU rows: {q.message}")
    return out


def _busy_gpus(host: Host, r: ProbeResult, policy: PreflightPolicy) -> list[tuple[int, str]]:
    if not (r.reachable and policy.require_gpus):
        return []
    ours = {pid for pid, run in r.health.runs if run == policy.run_id} if r.health else set()
    apps = [a for a in r.health.apps if a.pid not in ours] if r.health else []
    return busy_of(r.gpu.healthy, host.slots, policy, apps)


def busy_gpus(gpus: Sequence[Gpu], slots: int, policy: PreflightPolicy) -> list[str]:
    """Each GPU, of the ``slots`` a host's ranks use, that is busy under ``policy``:
    ``GPU 0 busy (31000 MiB used, 0% utilization)``."""
    return [f"GPU {i} busy ({said})" for i, said in busy_of(gpus, slots, policy)]


def busy_of(gpus: Sequence[Gpu], slots: int, policy: PreflightPolicy,
            apps: Sequence[ComputeApp] = ()) -> list[tuple[int, str]]:
    """(GPU index, what makes it busy): memory or utilization over the policy's thresholds, or
    another job's compute process on it (``apps``: nvidia-smi --query-compute-apps)."""
    busy = []
    for g in sorted(gpus, key=lambda g: g.index)[:slots]:
        mem = g.memory_used_mib is not None and g.memory_used_mib > policy.busy_memory_mib
        util = g.utilization_pct is not None and g.utilization_pct > policy.busy_util_pct
        procs = [f"{a.name} pid {a.pid}" for a in apps if a.gpu_uuid == g.uuid]
        if mem or util or procs:
            busy.append((g.index, f"{g.memory_used_mib} MiB used, {g.utilization_pct}% "
                         "utilization" + (f"; {', '.join(procs[:3])}" if procs else "")
                         + (" ..." if len(procs) > 3 else "")))
    return busy


def _duplicate_hostnames(results: Sequence[ProbeResult]) -> dict[str, list[str]]:
    seen: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for r in results:
        if not r.hostname:
            continue
        first = seen.setdefault(r.hostname, r.host)
        if first != r.host:
            out[r.host] = [f"reports the same hostname {r.hostname!r} as {first}: Open MPI would "
                           "take them for one machine; give each host its own hostname"]
    return out


def _gpu_warnings(usable: Sequence[ProbeResult], by_name: Mapping[str, Host]) -> list[str]:
    out = []
    models: dict[str, list[str]] = {}
    drivers: dict[str, list[str]] = {}
    for r in usable:
        gpus = sorted(r.gpu.healthy, key=lambda g: g.index)[: by_name[r.host].slots]
        for name in dict.fromkeys(g.name for g in gpus):
            models.setdefault(name, []).append(r.host)
        if r.driver_version:
            drivers.setdefault(r.driver_version, []).append(r.host)
    if len(models) > 1:
        out.append("mixed GPU models: " + "; ".join(f"{m} on {', '.join(h)}"
                                                   for m, h in models.items())
                   + " (the ring runs at the pace of the slowest GPU)")
    if len(drivers) > 1:
        out.append("NVIDIA driver versions differ: " + "; ".join(
            f"{d} on {', '.join(h)}" for d, h in drivers.items()))
    return out


def _doctor(inventory: Inventory, results: Mapping[str, ProbeResult],
            reachable: Sequence[ProbeResult], policy: PreflightPolicy
            ) -> dict[str, tuple[Judged, ...]]:
    """The doctor's findings per host, judged with ``--on-bad-host``. The NIC checks look at
    the interface the job would use, as chosen from every reachable host."""
    if not policy.doctor:
        return {}
    iface = dict(choose_network({r.host: r.interfaces for r in reachable},
                                policy.network_interface).per_host)
    return judge(inventory.hosts, results, policy.bad_host, iface, run_id=policy.run_id,
                 baselines=dict(policy.baselines), gpus=policy.require_gpus)


def _host_verdict(host: Host, problems: list[str], warnings: list[str], busy: bool,
                  policy: PreflightPolicy, judged: Sequence[Judged] = ()) -> HostVerdict:
    hard = [j for j in judged if j.action in ("fail", "exclude") and not j.said]
    problems = [*problems, *(j.finding.text() for j in hard)]
    warnings = [*warnings, *(j.finding.text() for j in judged if j.action == "warn"
                             and not j.said)]
    if problems:
        fail = (len(problems) > len(hard) and policy.on_bad_host == "fail") or any(
            j.action == "fail" for j in hard)
        status = HostStatus.FAILED if fail else HostStatus.EXCLUDED
        named = [j.finding.code for j in hard if j.finding.code in dict(policy.doctor_actions)]
        fix = ("fix the host or pass --on-bad-host exclude" if status is HostStatus.FAILED
               else f"excluded (--on-bad-host {named[0] + '=' if named else ''}exclude)")
        problems = [*problems[:-1], f"{problems[-1]}; {fix}"]
    elif busy and policy.on_busy == "exclude":
        status = HostStatus.EXCLUDED
        problems = [f"{warnings[0]}; excluded (--on-busy exclude)"]
    else:
        status = HostStatus.WARN if warnings else HostStatus.OK
    usable = host.slots if status in (HostStatus.OK, HostStatus.WARN) else 0
    return HostVerdict(host.name, status, host.slots, usable, tuple(problems), tuple(warnings),
                       tuple(judged))


def _job_problems(verdicts: Sequence[HostVerdict], policy: PreflightPolicy) -> list[str]:
    """What exclusions leave too little of. Failed hosts count as present: the user is told to
    fix them, and "no host left" on top of their own problems would only be noise."""
    usable = [v for v in verdicts if v.status is not HostStatus.EXCLUDED]
    excluded = [v.host for v in verdicts if v.status is HostStatus.EXCLUDED]
    left = f" after excluding {', '.join(excluded)}" if excluded else ""
    slots = sum(v.slots_asked if v.status is HostStatus.FAILED else v.slots_usable
                for v in usable)
    out = []
    if not usable:
        out.append(f"no usable host is left{left}")
    elif len(usable) < policy.min_hosts:
        out.append(f"only {len(usable)} usable hosts{left}, --min-hosts {policy.min_hosts}")
    if usable and policy.np is not None and policy.np > slots:
        out.append(f"-np {policy.np} needs {policy.np} slots, only {slots} are usable{left}")
    return out


def _add(into: dict[str, list[str]], more: dict[str, list[str]]) -> None:
    for host, items in more.items():
        into.setdefault(host, []).extend(items)
