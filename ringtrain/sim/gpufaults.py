"""Faults the GPU and NIC doctor looks for, made on a simulated host (``ringtrain sim
gpu-fault``): the fake nvidia-smi, the fake ``dmesg`` and a fake sysfs tree render them in the
real tools' formats (fake_nvidia_smi.py).

Everything is kept in the host's GPU state file (``hosts/<host>/gpu.json``): per GPU the health
fields (``pcie_width``, ``event_reasons``, ``ecc_uncorrected``, ``nvlinks`` and
``nvlinks_down``, ``replays``, ``nic_relation``...), per host the kernel log lines (``kmsg``),
the RDMA devices (``ib``) and the interface speed (``eth_speed``). The sysfs tree
(``hosts/<host>/sys``, ``$RINGTRAIN_SIM_SYSFS`` on the host) is written from that state, so one
file says what the host looks like. ``clear`` puts the host back to healthy.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ringtrain.errors import SimError

SLOWDOWNS = {"hw": 0x8, "sw-thermal": 0x20, "thermal": 0x40, "power-brake": 0x80}
NVLINKS = 18  # links per GPU once NVLink is faked (an H100 SXM has 18)
IFACE = "eth0"  # the simulated hosts' interface (netns.py)
IFACE_SPEED = 10000  # what a veth reports


@dataclass(frozen=True, slots=True)
class Fault:
    """One ``gpu-fault`` command's faults; None: leave as it is."""

    pcie_width: int | None = None
    pcie_gen: int | None = None
    slowdown: str | None = None
    ecc: int | None = None
    retired_pending: bool = False
    remap_pending: bool = False
    remap_failed: bool = False
    reset_required: bool = False
    drain: bool = False
    nvlink_down: str | None = None  # "3,5" or "all"
    xid: int | None = None
    replays: int | None = None
    nic_far: bool = False
    ib_port_down: bool = False
    ib_rate: int | None = None
    link_downed: int | None = None
    eth_speed: int | None = None

    def empty(self) -> bool:
        return all(getattr(self, f.name) in (None, False) for f in fields(self))


def apply(state: dict[str, Any], gpu: int, fault: Fault, uptime_s: float) -> dict[str, Any]:
    """``state`` with ``fault`` made on GPU ``gpu`` (host-wide faults ignore the GPU)."""
    gpus = {g["index"]: g for g in state.get("gpus", [])}
    if gpu not in gpus:
        raise SimError(f"no GPU {gpu} on this host (it has {len(gpus)})",
                       hint="pick --gpu from 0 to the host's GPU count - 1")
    _gpu_faults(gpus[gpu], fault)
    if fault.nvlink_down is not None:
        for other in gpus.values():
            other.setdefault("nvlinks", NVLINKS)
        gpus[gpu]["nvlinks_down"] = (list(range(NVLINKS)) if fault.nvlink_down == "all"
                                     else sorted({int(x) for x in fault.nvlink_down.split(",")}))
    if fault.xid is not None:
        bus = gpus[gpu]["pci_bus_id"].split(":", 1)[1][:5].lower()  # 00000000:3A:00.0 -> 3a:00
        state.setdefault("kmsg", []).append(
            f"[{uptime_s:12.6f}] NVRM: Xid (PCI:0000:{bus}): {fault.xid}, pid=4242, "
            f"name=python3, {XID_TEXT.get(fault.xid, 'Graphics Exception')}")
    _nic_faults(state, gpus[gpu], fault)
    return state


def _gpu_faults(g: dict[str, Any], fault: Fault) -> None:
    if fault.pcie_width is not None:
        g["pcie_width"] = fault.pcie_width
    if fault.pcie_gen is not None:  # judged only while busy: make the GPU busy too
        g.update(pcie_gen=fault.pcie_gen, event_reasons=0, utilization_gpu=100)
    if fault.slowdown is not None:
        g["event_reasons"] = SLOWDOWNS[fault.slowdown]
        g["temperature_gpu"] = 92 if "thermal" in fault.slowdown else g["temperature_gpu"]
    if fault.ecc is not None:
        g["ecc_uncorrected"] = fault.ecc
    for flag in ("retired_pending", "remap_pending", "remap_failed", "reset_required"):
        if getattr(fault, flag):
            g[flag] = True
    if fault.drain:
        g["drain_recommended"] = True
    if fault.replays is not None:
        g["replays"] = fault.replays


def _nic_faults(state: dict[str, Any], g: dict[str, Any], fault: Fault) -> None:
    if fault.nic_far or fault.ib_port_down or fault.ib_rate is not None or (
            fault.link_downed is not None):
        port = _rdma(state)
        if fault.nic_far:
            g["nic_relation"] = "SYS"
        if fault.ib_port_down:
            port.update(state="1: DOWN", phys_state="3: Disabled")
        if fault.ib_rate is not None:
            port["rate"] = f"{fault.ib_rate} Gb/sec (4X)"
        if fault.link_downed is not None:
            port["link_downed"] = fault.link_downed
    if fault.eth_speed is not None:
        state["eth_speed"] = fault.eth_speed


# Xid descriptions as the driver prints them (NVIDIA's Xid catalog)
XID_TEXT = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) "
            "has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
            13: "Graphics Exception: ESR 0x50df30=0x0", 31: "Ch 00000008, intr 00000000. MMU "
            "Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x7f8a_00000000.",
            94: "Contained: SM (0x1). RST: No, D-RST: No", 119: "Timeout after 6s of waiting "
            "for RPC response from GPU0 GSP!"}


def _rdma(state: dict[str, Any]) -> dict[str, Any]:
    """The host's RDMA port behind its interface (RoCE on eth0), made on first use."""
    ib = state.setdefault("ib", [])
    if not ib:
        ib.append({"device": "mlx5_0", "port": "1", "state": "4: ACTIVE",
                   "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)",
                   "link_layer": "Ethernet", "link_downed": 0})
    port: dict[str, Any] = ib[0]
    return port


def healthy(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with every fault this module makes taken away."""
    out = {k: v for k, v in state.items() if k not in ("kmsg", "ib", "eth_speed")}
    keep = set(GPU_BASE)
    out["gpus"] = [{k: v for k, v in g.items() if k in keep} for g in state.get("gpus", [])]
    return out


GPU_BASE = ("index", "name", "uuid", "serial", "pci_bus_id", "pstate", "compute_cap",
            "memory_total", "memory_used", "utilization_gpu", "utilization_memory",
            "temperature_gpu", "power_draw", "power_limit")


def write_sysfs(root: Path, state: Mapping[str, Any]) -> None:
    """The fake /sys the doctor reads on the host: class/net/{eth0,lo} and, when faked,
    class/infiniband/<dev>/ports/<n>. Rewritten whole (never half: a new tree is renamed in)."""
    tmp = root.with_name(root.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    ib = state.get("ib", [])
    net = tmp / "class" / "net"
    for name, speed in ((IFACE, state.get("eth_speed", IFACE_SPEED)), ("lo", None)):
        d = net / name
        d.mkdir(parents=True)
        (d / "operstate").write_text("up\n" if name == IFACE else "unknown\n")
        if speed is not None:
            (d / "speed").write_text(f"{speed}\n")
        if name == IFACE and ib:
            (d / "device" / "infiniband" / ib[0]["device"]).mkdir(parents=True)
    for p in ib:
        d = tmp / "class" / "infiniband" / p["device"] / "ports" / p["port"]
        (d / "counters").mkdir(parents=True)
        for key in ("state", "phys_state", "rate", "link_layer"):
            (d / key).write_text(f"{p[key]}\n")
        (d / "counters" / "link_downed").write_text(f"{p['link_downed']}\n")
    old = root.with_name(root.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if root.exists():
        root.rename(old)
    tmp.rename(root)
    shutil.rmtree(old, ignore_errors=True)
