"""The GPU and NIC doctor: one host's health (``doctor_parse.HostHealth``) in, findings out. PURE.

Each finding has a stable code, the GPU or port it is about, the value measured against the one
expected, a fix, and a severity: ``fatal`` findings are problems (the host is refused or
excluded under ``--on-bad-host``), ``warn`` findings are warnings. ``--on-bad-host CODE=ACTION``
moves one code to another action (``verdict`` applies it). The thresholds and their sources are
in ``CHECKS`` (docs/PREFLIGHT.md's table is generated from the same words and a test keeps
them equal).

"Since the last check" needs what the last check saw: ``Baseline`` (boot id, kernel time of the
check, PCIe replays and link-downed counters). Without one, Xid lines count since boot and
counters are judged by their value alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ringtrain.probe.doctor_parse import ALL_LINKS, GpuHealth, HostHealth, bus_key

FATAL, WARN = "fatal", "warn"

# Xid codes taken as a host fault (reset the GPU or drain the host). Source: the Azure HPC node
# health checks' Xid test (Azure/azurehpc-health-checks customTests/azure_gpu_xid.nhc, XID_EC:
# 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120), plus 94 and 95 (contained and
# uncontained ECC errors), which NVIDIA's k8s-device-plugin (internal/rm/health.go) and Meta's
# GCM health checks treat as critical. NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)
# gives each code's action. Others, e.g. 13, 31, 43, 45 (an application's fault or its
# clean-up, which the device plugin ignores), are warnings.
FATAL_XIDS = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95,
                        119, 120})

# NVML's clocks event reasons (nvml.h nvmlClocksEventReason*): the ones that mean the GPU is
# held down by a fault or its cooling, not by the job's own load or a setting.
EVENT_BITS = {0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
              0x80: "HW power brake"}
IDLE_BIT = 0x1
PCIE_REPLAYS_MAX = 100  # replays since reset with no earlier count to compare with (DCGM's PCIe
# health watch treats a rising replay count as a warning; a fixed floor avoids noise from the
# few replays link training leaves)
RATE_SHARE = 1.0  # a port or interface slower than the hosts' most common speed is flagged


@dataclass(frozen=True, slots=True)
class Check:
    code: str
    severity: str
    what: str
    threshold: str
    source: str
    fix: str


CHECKS: tuple[Check, ...] = (
    Check("gpu-count", FATAL, "GPUs nvidia-smi can read", "at least the host's slots",
          "inventory slots", "reseat or replace the GPU, or lower the host's slots"),
    Check("gpu-busy", WARN, "foreign compute processes and memory in use",
          "over 1024 MiB used or 10% utilization, or any compute process",
          "ringtrain's --busy-memory-mib / --busy-util defaults",
          "wait for the other job, or --on-busy exclude"),
    Check("other-job", WARN, "another ringtrain run's ranks on the host", "none",
          "RINGTRAIN_RUN_ID in the processes' environment",
          "wait for that run to end, or `ringtrain runs show RUN_ID`"),
    Check("pcie-width", WARN, "PCIe link width", "pcie.link.width.max",
          "nvidia-smi pcie.link.width.{current,max}",
          "reseat the GPU or its riser; check the slot"),
    Check("pcie-gen", WARN, "PCIe link generation while busy", "pcie.link.gen.max (judged only "
          "when the GPU is not idle: idle GPUs lower it to save power)",
          "nvidia-smi pcie.link.gen.{current,max}", "check the BIOS PCIe settings and the riser"),
    Check("pcie-replays", WARN, "PCIe replays since reset", f"not rising since the last check; "
          f"at most {PCIE_REPLAYS_MAX} without one", "nvidia-smi -q \"Replays Since Reset\" "
          "(DCGM PCIe health watch)", "reseat the GPU; replace the riser or cable"),
    Check("clock-slowdown", WARN, "clocks event reasons", "no HW slowdown, thermal or power brake",
          "nvidia-smi clocks_event_reasons.active (nvml.h bits 0x8, 0x20, 0x40, 0x80)",
          "check cooling, power supply and the chassis' power-brake signal"),
    Check("ecc-uncorrected", FATAL, "uncorrected ECC errors since the driver loaded", "0",
          "nvidia-smi ecc.errors.uncorrected.volatile.total", "reset the GPU (nvidia-smi -r) or "
          "drain the host; replace the GPU if they return"),
    Check("retired-pages-pending", FATAL, "retired pages pending", "No",
          "nvidia-smi retired_pages.pending (pre-Ampere)", "reset the GPU to retire the pages"),
    Check("row-remap-pending", FATAL, "row remapping pending", "No",
          "nvidia-smi remapped_rows.pending (Ampere and later)",
          "reset the GPU to complete the remapping"),
    Check("row-remap-failed", FATAL, "row remapping failed", "No",
          "nvidia-smi remapped_rows.failure", "replace the GPU (its spare rows are used up)"),
    Check("gpu-reset-required", FATAL, "GPU reset required", "recovery action None",
          "nvidia-smi gpu_recovery_action (R550+) or reset_status.reset_required",
          "reset the GPU (nvidia-smi -r) or reboot the host, as the action says"),
    Check("gpu-drain", FATAL, "drain recommended", "recovery action None",
          "nvidia-smi gpu_recovery_action \"Drain P2P\" / \"Drain and Reset\" or "
          "reset_status.drain_and_reset_recommended", "drain the host's jobs and reset the GPU"),
    Check("nvlink-down", FATAL, "NVLink links inactive", "every link of the host active",
          "nvidia-smi nvlink -s", "check the NVLink bridge or NVSwitch, and fabric manager"),
    Check("xid-fatal", FATAL, "fatal Xid events in the kernel log",
          "none since the last check (since boot without one)",
          "dmesg \"NVRM: Xid\"; codes from Azure/azurehpc-health-checks' Xid test, plus 94 and "
          "95 (NVIDIA k8s-device-plugin, Meta GCM)",
          "reset the GPU or reboot, as NVIDIA's Xid catalog says for the code"),
    Check("xid", WARN, "other Xid events in the kernel log", "none since the last check",
          "dmesg \"NVRM: Xid\"", "usually the application's fault: read the code in NVIDIA's "
          "Xid catalog"),
    Check("gpu-nic-far", WARN, "GPU to the nearest RDMA NIC, when the job's interface is one",
          "not SYS (across the CPU interconnect) for every NIC",
          "nvidia-smi topo -m", "pin ranks to GPUs near a NIC, or add a NIC on that socket"),
    Check("ib-port-down", FATAL, "InfiniBand/RoCE port of the job's interface", "ACTIVE",
          "/sys/class/infiniband/*/ports/*/state", "check the cable and the switch port "
          "(ibstat), or choose another interface"),
    Check("ib-rate-low", WARN, "InfiniBand/RoCE port rate", "the hosts' most common rate",
          "/sys/class/infiniband/*/ports/*/rate", "check the cable and the switch port speed"),
    Check("ib-link-downed", WARN, "times the port's link went down", "not rising since the last "
          "check; 0 without one", "/sys/class/infiniband/*/ports/*/counters/link_downed",
          "check the cable and transceiver"),
    Check("eth-speed-low", WARN, "Ethernet link speed of the job's interface",
          "the hosts' most common speed", "/sys/class/net/IF/speed",
          "check the cable and the switch port (ethtool IF)"),
    Check("tf-cpu-build", FATAL, "TensorFlow build on a GPU host", "not tensorflow-cpu",
          "the installed distribution (NAME-VERSION.dist-info)", "install TensorFlow's GPU "
          "build: pip install 'tensorflow[and-cuda]==VERSION' (the same version on every host)"),
    Check("tf-no-cudnn", WARN, "cuDNN for TensorFlow on a GPU host", "found",
          "pip nvidia-cudnn-cu*, or libcudnn.so* in LD_LIBRARY_PATH or the system library dirs",
          "pip install 'tensorflow[and-cuda]==VERSION', or install cuDNN for the host's CUDA"),
    Check("tf-cudnn-mismatch", WARN, "cuDNN of the CUDA and major TensorFlow was built for",
          "the pin of TensorFlow's and-cuda extra", "TensorFlow's METADATA; the pip cuDNN's "
          "version, or libcudnn.so.N", "pip install 'tensorflow[and-cuda]==VERSION' in the "
          "ranks' environment"),
    Check("hvd-no-nccl", FATAL, "Horovod's GPU all-reduce (Horovod jobs)", "built with NCCL",
          "ncclAllReduce in horovod/tensorflow/mpi_lib*.so (`horovodrun --check-build` lists "
          "NCCL)", "rebuild: HOROVOD_GPU_OPERATIONS=NCCL pip install --no-cache-dir "
          "--no-build-isolation --force-reinstall horovod==VERSION"),
)
BY_CODE = {c.code: c for c in CHECKS}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    gpu: int | None  # the GPU it is about (nvidia-smi index), None for the host or a port
    measured: str
    expected: str

    @property
    def check(self) -> Check:
        return BY_CODE[self.code]

    @property
    def severity(self) -> str:
        return self.check.severity

    def text(self) -> str:
        where = f"GPU {self.gpu} " if self.gpu is not None else ""
        return f"[{self.code}] {where}{self.measured} (expected {self.expected}); " \
               f"{self.check.fix}"


@dataclass(frozen=True, slots=True)
class Baseline:
    """What the last check of a host saw (kept by the launcher between runs)."""

    boot_id: str | None = None
    uptime_s: float | None = None
    replays: Mapping[str, int] = field(default_factory=dict)  # bus -> replays
    link_downed: Mapping[str, int] = field(default_factory=dict)  # "dev/port" -> count


def baseline_of(h: HostHealth) -> Baseline:
    return Baseline(h.boot_id, h.uptime_s, dict(h.replays),
                    {f"{p.device}/{p.port}": p.link_downed for p in h.ports
                     if p.link_downed is not None})


@dataclass(frozen=True, slots=True)
class Fleet:
    """What the doctor compares a host with: the hosts' most common port rate and interface
    speed (computed once for all hosts by ``fleet_of``)."""

    ib_rate: float | None = None
    eth_speed: float | None = None


def fleet_of(hosts: Mapping[str, HostHealth], iface: Mapping[str, str]) -> Fleet:
    rates = [p.rate_gbps for h in hosts.values() for p in h.ports
             if p.rate_gbps and p.state == "ACTIVE"]
    speeds = [n.speed_mbps for name, h in hosts.items() for n in h.nets
              if n.name == iface.get(name) and n.speed_mbps]
    return Fleet(_common(rates), _common(speeds))


def _common(values: Sequence[float] | Sequence[int]) -> float | None:
    return Counter(values).most_common(1)[0][0] if values else None


def examine(h: HostHealth, slots: int, *, iface: str | None = None, run_id: str | None = None,
            baseline: Baseline | None = None, fleet: Fleet = Fleet(), gpus: bool = True
            ) -> tuple[Finding, ...]:
    """Every finding about one host; ``slots``: the GPUs its ranks use (the first ``slots`` by
    index); ``gpus`` False (a CPU job): only the NIC and job checks."""
    used = {g.index for g in sorted(h.gpus, key=lambda g: g.index)[:slots]} if slots else {
        g.index for g in h.gpus}
    same_boot = baseline is not None and baseline.boot_id is not None and (
        baseline.boot_id == h.boot_id)
    out: list[Finding] = []
    for g in h.gpus:
        if g.index not in used or not gpus:
            continue
        out += _gpu_findings(g)
        replays = h.replays.get(bus_key(g.bus_id)) if g.bus_id else None
        before = baseline.replays.get(bus_key(g.bus_id)) if same_boot and g.bus_id and \
            baseline else None
        if replays is not None and before is not None and replays > before:
            out.append(Finding("pcie-replays", g.index, f"{replays} replays, {replays - before}"
                               " since the last check", "no new replays"))
        elif replays is not None and before is None and replays > PCIE_REPLAYS_MAX:
            out.append(Finding("pcie-replays", g.index, f"{replays} replays since reset",
                               f"at most {PCIE_REPLAYS_MAX}"))
        down = h.links_down.get(g.index, ())
        if down == (ALL_LINKS,):
            out.append(Finding("nvlink-down", g.index, "every NVLink inactive",
                               "every link active"))
        elif down and any(h.links_up.values()):
            out.append(Finding("nvlink-down", g.index, f"NVLink {_list(down)} inactive "
                               f"({h.links_up.get(g.index, 0)} active)", "every link active"))
    out += _xid_findings(h, used, baseline if same_boot else None) if gpus else []
    out += _nic_findings(h, used, iface, baseline if same_boot else None, fleet)
    others = sorted({run for _, run in h.runs if run != run_id})
    if others:
        pids = [str(p) for p, run in h.runs if run != run_id]
        out.append(Finding("other-job", None, f"ranks of run {', '.join(others)} (pid "
                           f"{_list(pids[:5])}{' ...' if len(pids) > 5 else ''})", "none"))
    return tuple(out)


def _gpu_findings(g: GpuHealth) -> list[Finding]:
    out = []
    if g.pcie_width is not None and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        out.append(Finding("pcie-width", g.index, f"PCIe x{g.pcie_width}",
                           f"x{g.pcie_width_max}"))
    idle = g.event_reasons is not None and g.event_reasons & IDLE_BIT
    if (g.pcie_gen is not None and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max
            and g.event_reasons is not None and not idle):
        out.append(Finding("pcie-gen", g.index, f"PCIe gen {g.pcie_gen} while busy",
                           f"gen {g.pcie_gen_max}"))
    held = [name for bit, name in EVENT_BITS.items() if (g.event_reasons or 0) & bit]
    if held:
        out.append(Finding("clock-slowdown", g.index, f"clocks held down: {', '.join(held)} "
                           f"({g.temperature_c if g.temperature_c is not None else '?'} C)",
                           "no slowdown"))
    if g.ecc_uncorrected:
        out.append(Finding("ecc-uncorrected", g.index,
                           f"{g.ecc_uncorrected} uncorrected ECC errors", "0"))
    if g.retired_pending:
        out.append(Finding("retired-pages-pending", g.index, "retired pages pending", "none"))
    if g.remap_pending:
        out.append(Finding("row-remap-pending", g.index, "row remapping pending", "none"))
    if g.remap_failed:
        out.append(Finding("row-remap-failed", g.index, "row remapping failed", "none"))
    action = (g.recovery_action or "").strip()
    if action.lower().startswith("drain") or g.drain_recommended:
        out.append(Finding("gpu-drain", g.index, f"recovery action {action or 'drain and reset'}",
                           "None"))
    elif action.lower() in ("reset", "reboot", "gpu reset", "node reboot") or g.reset_required:
        out.append(Finding("gpu-reset-required", g.index, f"recovery action {action or 'reset'}",
                           "None"))
    return out


def _xid_findings(h: HostHealth, used: set[int], baseline: Baseline | None) -> list[Finding]:
    index_of = {bus_key(g.bus_id): g.index for g in h.gpus if g.bus_id}
    since = baseline.uptime_s if baseline else None
    fresh = [x for x in h.xids if since is None or x.uptime_s is None or x.uptime_s > since]
    out = []
    for fatal in (True, False):
        by_gpu: dict[int | None, list[int]] = {}
        for x in fresh:
            if (x.code in FATAL_XIDS) is fatal:
                gpu = index_of.get(x.bus)
                if gpu is None or gpu in used:
                    by_gpu.setdefault(gpu, []).append(x.code)
        when = "since the last check" if since is not None else "since boot"
        for gpu, codes in by_gpu.items():
            counted = Counter(codes)
            said = ", ".join(f"Xid {c}" + (f" x{n}" if n > 1 else "") for c, n in counted.items())
            out.append(Finding("xid-fatal" if fatal else "xid", gpu, f"{said} {when}", "none"))
    return out


def _nic_findings(h: HostHealth, used: set[int], iface: str | None, baseline: Baseline | None,
                  fleet: Fleet) -> list[Finding]:
    net = next((n for n in h.nets if n.name == iface), None) if iface else None
    out = []
    if net is not None and net.rdma is None and net.speed_mbps and fleet.eth_speed and \
            net.speed_mbps < fleet.eth_speed * RATE_SHARE:
        out.append(Finding("eth-speed-low", None, f"{iface} at {_speed(net.speed_mbps)}",
                           f"{_speed(int(fleet.eth_speed))} like the other hosts"))
    rdma = net.rdma if net is not None else None
    for p in h.ports:
        key = f"{p.device}/{p.port}"
        if p.device == rdma and p.state and p.state != "ACTIVE":
            out.append(Finding("ib-port-down", None, f"{key} ({iface}) is {p.state} "
                               f"({p.phys_state})", "ACTIVE"))
            continue
        if p.state == "ACTIVE" and p.rate_gbps and fleet.ib_rate and p.rate_gbps < fleet.ib_rate:
            out.append(Finding("ib-rate-low", None, f"{key} at {p.rate_gbps:g} Gb/s",
                               f"{fleet.ib_rate:g} Gb/s like the other hosts"))
        before = baseline.link_downed.get(key) if baseline else None
        if p.link_downed and (before is None or p.link_downed > before):
            new = p.link_downed - (before or 0)
            out.append(Finding("ib-link-downed", None, f"{key} link went down {new} time"
                               f"{'s' * (new != 1)}" + (" since the last check" if before
                                                         is not None else ""), "0"))
    topo = h.topology
    column = topo.nic_of.get(rdma) if topo is not None and rdma else None
    if column is not None and topo is not None:
        # NCCL takes, for each GPU, the nearest of the host's active RDMA NICs: a GPU is far
        # when every one of them is across the CPU interconnect
        cols = sorted({topo.nic_of[p.device] for p in h.ports
                       if p.state == "ACTIVE" and p.device in topo.nic_of} | {column})
        far = sorted(g for g in used if all(topo.relation.get((g, c)) == "SYS" for c in cols))
        if far:
            verb = "reaches" if len(far) == 1 else "reach"
            nics = rdma if len(cols) == 1 else f"every RDMA NIC ({len(cols)})"
            out.append(Finding("gpu-nic-far", None, f"GPU {_list(far)} {verb} {nics} "
                               "across the CPU interconnect (SYS)", "NODE, PHB, PXB or PIX"))
    return out


def _speed(mbps: int) -> str:
    return f"{mbps // 1000} Gb/s" if mbps >= 1000 and mbps % 1000 == 0 else f"{mbps} Mb/s"


def _list(items: Sequence[object]) -> str:
    return ", ".join(str(i) for i in items)
