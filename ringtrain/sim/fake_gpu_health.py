"""The fake nvidia-smi's health outputs (and the fake dmesg), in the real tools' formats.

Standalone like fake_nvidia_smi.py (standard library only): ``up`` copies it beside the fake
``nvidia-smi`` in ``<state_dir>/bin``, which imports it from there. Formats are those of the
real captures in tests/unit/golden/probe/doctor/ (an R535 driver, the simulated one):

* ``--query-gpu`` health fields: values as R535 prints them (``0x0000000000000001``, ``Yes``,
  ``Enabled``); ``gpu_recovery_action`` and ``remapped_rows.*`` are not valid query-gpu fields
  on R535 (``--query-remapped-rows`` has the latter), ``reset_status.*`` are.
* ``-q``: the header and per GPU its name, bus id, PCIe link and replay counter lines, laid out
  as the real ``-q`` (label padded to column 55, then ``: value``).
* ``nvlink -s``: ``GPU i: NAME (UUID: ...)`` then ``\\t Link n: 26.562 GB/s`` or ``<inactive>``;
  all links down: NVML's "all links are inactive" line; no NVLink: nothing.
* ``topo -m``: tab-separated, ANSI underline around the header, NIC legend.
* ``dmesg``: the host's kernel lines (``kmsg`` in its state), nothing else.
"""

from __future__ import annotations

import time
from typing import Any

# field -> (key in a GPU's state, the healthy value)
HEALTH: dict[str, tuple[str, Any]] = {
    "pcie.link.gen.current": ("pcie_gen", 4),
    "pcie.link.gen.max": ("pcie_gen_max", 4),
    "pcie.link.gen.gpucurrent": ("pcie_gen", 4),
    "pcie.link.gen.gpumax": ("pcie_gen_max", 4),
    "pcie.link.width.current": ("pcie_width", 16),
    "pcie.link.width.max": ("pcie_width_max", 16),
    "clocks_event_reasons.active": ("event_reasons", 0x1),
    "clocks_throttle_reasons.active": ("event_reasons", 0x1),
    "ecc.mode.current": ("ecc_mode", "Enabled"),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", 0),
    "retired_pages.pending": ("retired_pending", False),
    "reset_status.reset_required": ("reset_required", False),
    "reset_status.drain_and_reset_recommended": ("drain_recommended", False),
}
REMAPPED = {"gpu_bus_id": "pci_bus_id", "gpu_uuid": "uuid", "remapped_rows.pending":
            "remap_pending", "remapped_rows.failure": "remap_failed",
            "remapped_rows.correctable": "remap_correctable",
            "remapped_rows.uncorrectable": "remap_uncorrectable"}
LINK_SPEED = "26.562 GB/s"


def get(gpu: dict[str, Any], key: str, default: Any) -> Any:
    return gpu.get(key, default)


def show(value: Any) -> str:
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return str(value)


def health_value(gpu: dict[str, Any], field: str) -> str:
    key, default = HEALTH[field]
    value = get(gpu, key, default)
    if key == "event_reasons":
        return f"0x{int(value):016X}"
    return show(value)


def remapped_rows(fields_arg: str, fmt: str, gpus: list[dict[str, Any]]) -> tuple[str, int]:
    names = [f.strip() for f in fields_arg.split(",")]
    for name in names:
        if name not in REMAPPED:
            return f'Field "{name}" is not a valid field to query.\n\n', 2
    lines = [] if "noheader" in fmt.split(",") else [", ".join(names)]
    defaults = {"remap_pending": False, "remap_failed": False, "remap_correctable": 0,
                "remap_uncorrectable": 0}
    lines += [", ".join(show(g.get(REMAPPED[n], defaults.get(REMAPPED[n]))) for n in names)
              for g in gpus]
    return "".join(line + "\n" for line in lines), 0


def _kv(indent: int, label: str, value: Any = None) -> str:
    head = " " * indent + label
    return head + "\n" if value is None else f"{head.ljust(55)}: {value}\n"


def query_all(gpus: list[dict[str, Any]], state: dict[str, Any], stamp: str) -> str:
    out = ["\n==============NVSMI LOG==============\n\n", _kv(0, "Timestamp", stamp),
           _kv(0, "Driver Version", state["driver_version"]),
           _kv(0, "CUDA Version", state["cuda_version"]), "\n",
           _kv(0, "Attached GPUs", len(state["gpus"]))]
    for g in gpus:
        out += [f"GPU {g['pci_bus_id']}\n", _kv(4, "Product Name", g["name"]),
                _kv(4, "GPU UUID", g["uuid"]), _kv(4, "PCI"),
                _kv(8, "Bus Id", g["pci_bus_id"]), _kv(8, "GPU Link Info"),
                _kv(12, "PCIe Generation"),
                _kv(16, "Max", get(g, "pcie_gen_max", 4)),
                _kv(16, "Current", get(g, "pcie_gen", 4)),
                _kv(12, "Link Width"),
                _kv(16, "Max", f"{get(g, 'pcie_width_max', 16)}x"),
                _kv(16, "Current", f"{get(g, 'pcie_width', 16)}x"),
                _kv(8, "Replays Since Reset", get(g, "replays", 0)),
                _kv(8, "Replay Number Rollovers", 0)]
    return "".join(out)


def nvlink_status(gpus: list[dict[str, Any]]) -> str:
    out = []
    for g in gpus:
        links = int(g.get("nvlinks", 0))
        if not links:
            continue
        out.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n")
        down = set(g.get("nvlinks_down", []))
        if len(down) >= links:
            out.append("NVML: Unable to retrieve NVLink information as all links are inactive\n")
            continue
        out += [f"\t Link {i}: {'<inactive>' if i in down else LINK_SPEED}\n"
                for i in range(links)]
    return "".join(out)


def topology(gpus: list[dict[str, Any]], state: dict[str, Any]) -> str:
    nics = [p["device"] for p in state.get("ib", [])]
    cols = [f"GPU{g['index']}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    out = ["\t\x1b[4m" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
           + "\x1b[0m\n"]
    for g in gpus:
        cells = [" X " if o is g else ("NV18" if g.get("nvlinks") and o.get("nvlinks")
                                       else "NODE") for o in gpus]
        cells += [g.get("nic_relation", "PIX") for _ in nics]
        out.append("\t".join([f"GPU{g['index']}", *cells, "0-15", "0", "", "N/A"]) + "\n")
    for i, _ in enumerate(nics):
        cells = [g.get("nic_relation", "PIX") for g in gpus]
        cells += [" X " if j == i else "PIX" for j in range(len(nics))]
        out.append("\t".join([f"NIC{i}", *cells]) + "\n")
    out.append("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the "
               "SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n  NODE = Connection "
               "traversing PCIe as well as the interconnect between PCIe Host Bridges within "
               "a NUMA node\n  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge "
               "(typically the CPU)\n  PXB  = Connection traversing multiple PCIe bridges "
               "(without traversing the PCIe Host Bridge)\n  PIX  = Connection traversing at "
               "most a single PCIe bridge\n  NV#  = Connection traversing a bonded set of # "
               "NVLinks\n")
    if nics:
        out.append("\nNIC Legend:\n\n" + "".join(f"  NIC{i}: {n}\n" for i, n in enumerate(nics)))
    return "".join(out)


def render(opts: dict[str, str], gpus: list[dict[str, Any]], state: dict[str, Any]
           ) -> tuple[str, int] | None:
    """The health commands' answers; None: not one of them."""
    if "--query-remapped-rows" in opts:
        return remapped_rows(opts["--query-remapped-rows"], opts.get("--format", ""), gpus)
    if "-q" in opts or "--query" in opts:
        return query_all(gpus, state, time.strftime("%a %b %d %H:%M:%S %Y")), 0
    if "nvlink" in opts and ("-s" in opts or "--status" in opts):
        return nvlink_status(gpus), 0
    if "topo" in opts and ("-m" in opts or "--matrix" in opts):
        return topology(gpus, state), 0
    return None


def dmesg(state: dict[str, Any] | None) -> str:
    return "".join(line + "\n" for line in (state or {}).get("kmsg", []))
