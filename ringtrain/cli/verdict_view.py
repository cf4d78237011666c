"""The pre-flight table (``ringtrain check``, and every launch before it starts): one row per
host with its status, GPUs, versions and problems; and the same verdict as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringtrain.cli.plain import cell, printable
from ringtrain.hostfile import Inventory
from ringtrain.probe.hostprobe import GpuStatus, ProbeReport, ProbeResult
from ringtrain.probe.verdict import HostStatus, HostVerdict, PreflightPolicy, PreflightVerdict

_NO_GPU = {GpuStatus.NOT_INSTALLED: "no nvidia-smi", GpuStatus.NO_GPUS: "no GPUs",
           GpuStatus.FAILED: "nvidia-smi failed"}
_MPI_SHORT = (("Open MPI", "ompi"), ("MPICH", "mpich"), ("Intel MPI", "impi"))
_STYLE = {HostStatus.OK: "green", HostStatus.WARN: "yellow", HostStatus.EXCLUDED: "magenta",
          HostStatus.FAILED: "bold red"}


def print_verdict(inventory: Inventory, report: ProbeReport, verdict: PreflightVerdict,
                  policy: PreflightPolicy, *, stderr: bool = False) -> None:
    console = Console(soft_wrap=False, stderr=stderr)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # logs and pipes: do not fold every cell
    table = Table(title=cell(f"ringtrain check: {inventory.source} ({len(inventory.hosts)} hosts)"),
                  show_lines=False, header_style="bold")
    for col in ("HOST", "STATUS", "GPUS", "MODEL", "MEMORY", "VERSIONS", "PROBLEMS"):
        table.add_column(col, overflow="fold")
    for hv in verdict.hosts:
        table.add_row(*host_row(hv, report.result(hv.host), policy))
    console.print(table)
    for warning in verdict.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    net = verdict.network
    if net is not None and net.include:
        env = " ".join(f"{k}={v}" for k, v in net.env)
        console.print(f"network: {','.join(net.include)} ({net.reason}); Open MPI "
                      f"btl/oob_tcp_if_include={','.join(net.include)} {env}", highlight=False,
                      markup=False)  # interface names come from the hosts: never markup
    hosts, slots = len(verdict.usable_slots), sum(n for _, n in verdict.usable_slots)
    if not verdict.refused:
        console.print(Text(f"ok: a launch would use {hosts} host{'s' * (hosts != 1)}, "
                           f"{slots} slot{'s' * (slots != 1)}", style="green"))


def host_row(hv: HostVerdict, r: ProbeResult, policy: PreflightPolicy) -> tuple[Any, ...]:
    status = Text(hv.status.value, style=_STYLE[hv.status])
    if not r.reachable:
        return (cell(hv.host), status, "-", "-", "-", "-", _notes(hv))
    gpus = r.gpu.healthy
    seen = f"{len(gpus)}/{hv.slots_asked}" if policy.require_gpus else str(len(gpus))
    models = ", ".join(dict.fromkeys(g.name for g in gpus)) or _NO_GPU.get(r.gpu.status, "-")
    totals = [g.memory_total_mib for g in gpus if g.memory_total_mib is not None]
    used = [g.memory_used_mib for g in gpus if g.memory_used_mib is not None]
    memory = (f"{max(totals) / 1024:.0f} GiB, max used {max(used) / 1024:.1f}"
              if totals and used else "-")
    v = r.versions
    mpi = v.mpi
    for long, short in _MPI_SHORT:
        mpi = mpi.replace(long, short) if mpi else mpi
    parts = [("py", v.python), ("tf", v.tensorflow), ("hvd", v.horovod), ("", mpi),
             ("drv", r.driver_version), ("rt", v.ringtrain or None)]
    versions = " ".join(f"{k} {val}".strip() for k, val in parts if val) or "-"
    # cells, not str: a GPU name or version printed by a host is never rich markup ("[/x]"
    # would end `ringtrain check` with a MarkupError) nor an escape sequence (plain.py)
    return (cell(hv.host), status, *map(cell, (seen, models, memory, versions)), _notes(hv))


def _notes(hv: HostVerdict) -> Text:
    text = Text()
    for p in hv.problems:
        text.append(("\n" if text else "") + printable(p), style="red")
    for w in hv.warnings:
        if w not in " ".join(hv.problems):
            text.append(("\n" if text else "") + printable(w), style="yellow")
    return text


def verdict_to_dict(inventory: Inventory, report: ProbeReport,
                    verdict: PreflightVerdict) -> dict[str, Any]:
    hosts = []
    for hv in verdict.hosts:
        r = report.result(hv.host)
        hosts.append({
            "host": hv.host, "status": hv.status.value, "slots_asked": hv.slots_asked,
            "slots_usable": hv.slots_usable, "problems": list(hv.problems),
            "warnings": list(hv.warnings), "doctor": _findings(hv),
            "reachable": r.reachable, "error": r.error,
            "hostname": r.hostname, "gpu_status": r.gpu.status.value,
            "gpu_message": r.gpu.message, "driver_version": r.driver_version,
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid,
                      "memory_total_mib": g.memory_total_mib,
                      "memory_used_mib": g.memory_used_mib,
                      "utilization_pct": g.utilization_pct, "problem": g.problem}
                     for g in r.gpus],
            "versions": dict(r.versions.items()) | {"error": r.versions.error},
            "interfaces": [{"name": i.name, "cidr": i.cidr, "scope": i.scope}
                           for i in r.interfaces],
            "duration_s": round(r.duration_s, 3),
        })
    net = verdict.network
    return {
        "source": inventory.source, "refused": verdict.refused, "hosts": hosts,
        "problems": list(verdict.problems), "warnings": list(verdict.warnings),
        "usable_slots": dict(verdict.usable_slots),
        "network": None if net is None else {
            "include": list(net.include), "ifnames": list(net.ifnames),
            "mca": dict(net.mca), "env": dict(net.env), "reason": net.reason},
    }


def _findings(hv: HostVerdict) -> list[dict[str, Any]]:
    return [{"code": j.finding.code, "gpu": j.finding.gpu, "severity": j.finding.severity,
             "measured": j.finding.measured, "expected": j.finding.expected,
             "fix": j.finding.check.fix, "action": j.action} for j in hv.findings]


def doctor_to_dict(verdict: PreflightVerdict) -> dict[str, Any]:
    """``ringtrain check --doctor --json``: each host's findings and its status."""
    return {"refused": verdict.refused, "hosts": [
        {"host": hv.host, "status": hv.status.value, "findings": _findings(hv)}
        for hv in verdict.hosts]}


def print_doctor(inventory: Inventory, verdict: PreflightVerdict) -> None:
    """``ringtrain check --doctor``: one row per finding (a healthy host: one "ok" row)."""
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    table = Table(title=cell(f"ringtrain doctor: {inventory.source} ({len(inventory.hosts)} "
                             "hosts)"),
                  header_style="bold")
    for col in ("HOST", "CODE", "GPU", "MEASURED", "EXPECTED", "ACTION", "FIX"):
        table.add_column(col, overflow="fold")
    for hv in verdict.hosts:
        if not hv.findings:
            said = "ok" if hv.usable else (hv.problems[0] if hv.problems else hv.status.value)
            table.add_row(cell(hv.host), "-", "-", cell(said), "", "", "")
        for j in hv.findings:
            f = j.finding
            style = "bold red" if j.action in ("fail", "exclude") else "yellow"
            table.add_row(cell(hv.host), cell(f.code, style), "-" if f.gpu is None else str(f.gpu),
                          cell(f.measured), cell(f.expected), j.action, cell(f.check.fix))
    console.print(table)
    sick = sum(bool(hv.findings) for hv in verdict.hosts)
    console.print(Text(f"{sick} of {len(verdict.hosts)} hosts with findings", style=(
        "yellow" if sick else "green")))
