"""Parsers of the doctor's sections (``doctor_script``) into one value per host. PURE.

Input is text exactly as the tools print it; golden files of real outputs are in
tests/unit/golden/probe/doctor/. A value a GPU or driver does not report (``[N/A]``,
``[Not Supported]``, a field the driver refused) is None: "not supported", never a fault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ringtrain.probe.sections import NO_VALUE, Section, clip

_UNSUPPORTED = NO_VALUE | {"[Unknown Error]"}  # a health field nvidia-smi could not read
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# An Xid line: "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off
# the bus." (the time may follow other words: dmesg -x's "kern  :err   : "). Found by
# str.find, then matched from there with anchored, bounded patterns: the old single pattern
# (two lazy wildcards) took 14 s on a 156 KiB line.
XID_MARK = "NVRM: Xid ("
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]{1,32})\): (?P<code>\d{1,4})\b,?\s*(?P<text>.*)")
_TIME_RE = re.compile(r"\[\s{0,16}(?P<t>\d{1,12}\.\d{1,9})\]")
_RUN_RE = re.compile(r"^rank (\d{1,9}) ([A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec")
_LINK_RE = re.compile(r"^\s*Link (\d{1,3}): (.*)$")
_GPU_HEAD_RE = re.compile(r"^GPU (\d{1,3}): ")
ALL_LINKS = -1  # nvidia-smi nvlink -s: "Unable to retrieve NVLink information as all links are
# inactive" in place of the GPU's link lines
_TOPO_WORDS = frozenset({"CPU", "NUMA", "GPU", "Affinity", "ID"})  # "CPU Affinity" ... columns
_BUS_RE = re.compile(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})")


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """One GPU's health fields; None: not supported by this GPU or driver."""

    index: int
    bus_id: str | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    event_reasons: int | None = None  # clocks event (throttle) reasons, NVML's bit mask
    ecc_enabled: bool | None = None
    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    recovery_action: str | None = None  # R550+: None, Reset, Reboot, Drain P2P, Drain and Reset
    reset_required: bool | None = None  # older drivers' reset_status.*
    drain_recommended: bool | None = None
    temperature_c: int | None = None
    utilization_pct: int | None = None


@dataclass(frozen=True, slots=True)
class ComputeApp:
    pid: int
    name: str
    gpu_uuid: str
    used_mib: int | None


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    bus: str  # "3b:00", the form nvidia-smi's bus ids are matched on
    text: str
    uptime_s: float | None  # kernel time of the line (seconds since boot); None with dmesg -T


@dataclass(frozen=True, slots=True)
class IbPort:
    device: str
    port: str
    state: str  # "ACTIVE", "DOWN", ... (the words after "4: ")
    phys_state: str
    rate_gbps: float | None
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    link_downed: int | None


@dataclass(frozen=True, slots=True)
class NetLink:
    name: str
    speed_mbps: int | None  # None: the driver does not say (virtual devices, -1)
    operstate: str
    rdma: str | None  # the RDMA device behind it (mlx5_0), if any


@dataclass(frozen=True, slots=True)
class Topology:
    """``nvidia-smi topo -m``: the relation of each GPU to each NIC (SYS, NODE, PHB, PXB, PIX)."""

    nic_of: Mapping[str, str]  # RDMA device name -> its column (NIC0, or the name itself)
    relation: Mapping[tuple[int, str], str]  # (GPU index, column) -> relation


@dataclass(frozen=True, slots=True)
class HostHealth:
    gpus: tuple[GpuHealth, ...] = ()
    gpus_note: str | None = None  # why the health query gave nothing (no driver, failed)
    replays: Mapping[str, int] = field(default_factory=dict)  # bus -> PCIe replays
    links_down: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # GPU -> links
    links_up: Mapping[int, int] = field(default_factory=dict)  # GPU -> active links
    apps: tuple[ComputeApp, ...] = ()
    xids: tuple[Xid, ...] = ()
    xid_note: str | None = None  # the kernel log could not be read, and why
    boot_id: str | None = None
    uptime_s: float | None = None
    ports: tuple[IbPort, ...] = ()
    nets: tuple[NetLink, ...] = ()
    topology: Topology | None = None
    runs: tuple[tuple[int, str], ...] = ()  # (pid, run id) of ringtrain ranks on the host

    def gpu(self, index: int) -> GpuHealth | None:
        return next((g for g in self.gpus if g.index == index), None)


def bus_key(bus_id: str) -> str:
    """``00000000:3B:00.0`` or ``0000:3b:00`` -> ``3b:00`` (bus and device, what Xid lines
    and nvidia-smi share)."""
    m = _BUS_RE.match(bus_id.strip())
    return f"{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}" if m else bus_id.lower()


def _int(v: str) -> int | None:
    v = v.strip()
    if v in _UNSUPPORTED:
        return None
    if v.lower().startswith("0x"):
        try:
            return int(v, 16)
        except ValueError:
            return None
    return int(v) if re.fullmatch(r"-?\d{1,15}", v) else None


def _yes(v: str) -> bool | None:
    v = v.strip().lower()
    return {"yes": True, "no": False, "enabled": True, "disabled": False}.get(v)


def _text(v: str) -> str | None:
    v = v.strip()
    return None if v in _UNSUPPORTED else clip(v)


_SETTERS = {
    "pci.bus_id": ("bus_id", _text),
    "pcie.link.gen.current": ("pcie_gen", _int),
    "pcie.link.gen.max": ("pcie_gen_max", _int),
    "pcie.link.width.current": ("pcie_width", _int),
    "pcie.link.width.max": ("pcie_width_max", _int),
    "clocks_event_reasons.active": ("event_reasons", _int),
    "clocks_throttle_reasons.active": ("event_reasons", _int),
    "ecc.mode.current": ("ecc_enabled", _yes),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", _int),
    "retired_pages.pending": ("retired_pending", _yes),
    "remapped_rows.pending": ("remap_pending", _yes),
    "remapped_rows.failure": ("remap_failed", _yes),
    "gpu_recovery_action": ("recovery_action", _text),
    "reset_status.reset_required": ("reset_required", _yes),
    "reset_status.drain_and_reset_recommended": ("drain_recommended", _yes),
    "temperature.gpu": ("temperature_c", _int),
    "utilization.gpu": ("utilization_pct", _int),
}


def parse_health(text: str, exit_code: int | None) -> tuple[tuple[GpuHealth, ...], str | None]:
    """The health section -> (GPUs, a note when nothing could be read)."""
    lines = text.splitlines()
    fields = lines[0][len("#fields "):].split(",") if lines and lines[0].startswith(
        "#fields ") else []
    if exit_code == 127:
        return (), "nvidia-smi not installed"
    gpus = []
    other = []
    remap: dict[str, tuple[bool | None, bool | None]] = {}
    for line in lines[1:]:
        if line.startswith("#remap "):
            parts = [v.strip() for v in line[7:].split(",")]
            if len(parts) == 3:
                remap[bus_key(parts[0])] = (_yes(parts[1]), _yes(parts[2]))
            continue
        values = [v.strip() for v in line.split(", ")]
        if len(values) != len(fields) or "index" not in fields:
            if line.strip():
                other.append(line.strip())
            continue
        row = dict(zip(fields, values, strict=True))
        index = _int(row["index"])
        if index is None:
            continue
        kwargs: dict[str, object] = {}
        for name, raw in row.items():
            if name in _SETTERS:
                attr, conv = _SETTERS[name]
                value = conv(raw)
                if value is not None or attr not in kwargs:
                    kwargs[attr] = value
        gpus.append(GpuHealth(index, **kwargs))  # type: ignore[arg-type]
    if remap:
        gpus = [replace(g, remap_pending=remap[k][0], remap_failed=remap[k][1])
                if g.bus_id and (k := bus_key(g.bus_id)) in remap else g for g in gpus]
    note = None if gpus else clip(other[0]) if other else "nvidia-smi listed no GPU"
    return tuple(gpus), note


def parse_apps(text: str, exit_code: int | None) -> tuple[ComputeApp, ...]:
    if exit_code != 0:
        return ()
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(", ")]
        if len(parts) != 4 or _int(parts[0]) is None:
            continue
        out.append(ComputeApp(int(parts[0]), clip(parts[1]), parts[2], _int(parts[3])))
    return tuple(out)


def parse_replays(text: str) -> dict[str, int]:
    """``nvidia-smi -q``'s ``GPU 00000000:3B:00.0`` headers and ``Replays Since Reset`` lines
    -> bus -> replays since the GPU was last reset."""
    out: dict[str, int] = {}
    bus: str | None = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            bus = bus_key(line[4:])
        elif bus is not None and "Replays Since Reset" in line:
            n = _int(line.partition(":")[2])
            if n is not None:
                out[bus] = n
    return out


def parse_nvlink(text: str, exit_code: int | None
                 ) -> tuple[dict[int, tuple[int, ...]], dict[int, int]]:
    """``nvidia-smi nvlink -s`` -> (GPU -> inactive links, GPU -> active links)."""
    down: dict[int, list[int]] = {}
    up: dict[int, int] = {}
    gpu: int | None = None
    if exit_code != 0:
        return {}, {}
    for line in text.splitlines():
        head = _GPU_HEAD_RE.match(line)
        if head:
            gpu = int(head.group(1))
            continue
        if gpu is not None and "all links are inactive" in line:
            down[gpu] = [ALL_LINKS]
            continue
        link = _LINK_RE.match(line)
        if link and gpu is not None:
            if "inactive" in link.group(2).lower():
                down.setdefault(gpu, []).append(int(link.group(1)))
            else:
                up[gpu] = up.get(gpu, 0) + 1
    return {g: tuple(v) for g, v in down.items()}, up


def parse_topology(text: str, exit_code: int | None) -> Topology | None:
    """``nvidia-smi topo -m``: tab-separated, an ANSI underline around the header, a blank cell
    before GPU NUMA ID, NIC0.. named in a "NIC Legend" (older drivers: the RDMA device names
    the column). Split on any whitespace, so copies with tabs expanded read the same."""
    if exit_code != 0:
        return None
    lines = [_ANSI_RE.sub("", line) for line in text.splitlines()]
    header = next((line.split() for line in lines if line.strip().startswith("GPU0")), None)
    if header is None:
        return None
    columns = [c for c in header if c not in _TOPO_WORDS]
    nic_of: dict[str, str] = {}
    relation: dict[tuple[int, str], str] = {}
    for line in lines:
        cells = line.split()
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend:
            nic_of[legend.group(2)] = legend.group(1)
        elif len(cells) > 1 and re.fullmatch(r"GPU\d{1,3}", cells[0]) and cells[0] != line.strip():
            for col, value in zip(columns, cells[1:], strict=False):
                relation[(int(cells[0][3:]), col)] = value
    for col in columns:
        if not re.fullmatch(r"GPU\d+|NIC\d+", col):
            nic_of.setdefault(col, col)  # older drivers: the RDMA device names the column
    return Topology(nic_of, relation)


def read_xid(line: str) -> Xid | None:
    """One kernel log line's Xid, or None. Linear in the line: the mark found by ``str.find``
    (its first), the kernel time as the first ``[ seconds]`` before it."""
    at = line.find(XID_MARK)
    m = _XID_RE.match(line, at) if at >= 0 else None
    if m is None:
        return None
    t = _TIME_RE.search(line, 0, at)
    return Xid(int(m.group("code")), bus_key(m.group("pci")), clip(m.group("text").strip()),
               float(t.group("t")) if t else None)


def parse_xid(text: str, exit_code: int | None
              ) -> tuple[tuple[Xid, ...], str | None, str | None, float | None]:
    """-> (Xid lines, why the log could not be read, boot id, uptime)."""
    boot = uptime = None
    xids = []
    rest = []
    for line in text.splitlines():
        if line.startswith("#boot "):
            boot = line[6:].strip() or None
        elif line.startswith("#uptime "):
            try:
                uptime = float(line[8:].strip())
            except ValueError:
                uptime = None
        else:
            xid = read_xid(line)
            if xid is not None:
                xids.append(xid)
            elif line.strip():
                rest.append(line.strip())
    note = None
    if exit_code not in (0, None):
        note = clip(rest[0]) if rest else f"dmesg failed (exit {exit_code})"
    return tuple(xids), note, boot, uptime


def parse_links(text: str) -> tuple[tuple[IbPort, ...], tuple[NetLink, ...]]:
    ports, nets = [], []
    for line in text.splitlines():
        if line.startswith("port "):
            head, *vals = line[5:].split("|")
            dev, _, port = head.partition(" ")
            if len(vals) != 5:
                continue
            state, phys, rate, layer, downed = vals
            m = _RATE_RE.match(rate.strip())
            ports.append(IbPort(dev, port, _after_colon(state), _after_colon(phys),
                                float(m.group(1)) if m else None, layer.strip(), _int(downed)))
        elif line.startswith("net "):
            vals = line[4:].split("|")
            if len(vals) != 4:
                continue
            speed = _int(vals[1])
            nets.append(NetLink(vals[0], speed if speed and speed > 0 else None,
                                vals[2].strip(), vals[3].strip() or None))
    return tuple(ports), tuple(nets)


def _after_colon(v: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE`` (sysfs prints the number and the name)."""
    return v.partition(":")[2].strip() if ":" in v else v.strip()


def parse_runs(text: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(m.group(1)), m.group(2)) for line in text.splitlines()
                 if (m := _RUN_RE.match(line.strip())))


def parse_doctor(sections: Mapping[str, Section]) -> HostHealth | None:
    """All the doctor's sections of one host's probe output; None when it sent none (an older
    probe, or a wrapper that answers from a table)."""
    if "health" not in sections:
        return None

    def body(name: str) -> tuple[str, int | None]:
        s = sections.get(name)
        return (s.body, s.exit_code) if s else ("", None)

    gpus, note = parse_health(*body("health"))
    down, up = parse_nvlink(*body("nvlink"))
    xids, xid_note, boot, uptime = parse_xid(*body("xid"))
    ports, nets = parse_links(body("links")[0])
    return HostHealth(
        gpus=gpus, gpus_note=note, replays=parse_replays(body("pcie")[0]),
        links_down=down, links_up=up, apps=parse_apps(*body("apps")), xids=xids,
        xid_note=xid_note, boot_id=boot, uptime_s=uptime, ports=ports, nets=nets,
        topology=parse_topology(*body("topo")), runs=parse_runs(body("jobs")[0]))
