#!/usr/bin/env python3
"""A fake ``nvidia-smi`` for simulated hosts, byte-compatible with the real one where parsed.

Standalone on purpose (stdlib only, no ringtrain import): ``up`` copies this file to
``<state_dir>/bin/nvidia-smi`` behind a ``#!/usr/bin/python3 -IS`` line, so each call costs one
bare interpreter start (about 15 ms) on every probe.

The GPUs it reports come from a JSON state file written by ``ringtrain.sim.gpus``: the path in
``$RINGTRAIN_SIM_GPU_STATE`` (set per host by sshd's SetEnv), else ``../hosts/<hostname>/gpu.json``
next to this script. No state file reads like a host without a working driver.

Reproduced (formats checked against real outputs of drivers 450-580):

* ``--query-gpu=a,b --format=csv[,noheader][,nounits]``: fields joined by ``", "``; the header
  names each field by its canonical name plus unit (``memory.total [MiB]``, also with
  ``nounits``); values carry units unless ``nounits`` (``81559 MiB``, ``0 %``, ``69.84 W``).
  An unknown field prints ``Field "x" is not a valid field to query.`` and a blank line, exit 2.
* ``-L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)``.
* ``--query-compute-apps=pid,used_memory``: one row per process holding a fake GPU (below).
* ``-i/--id`` (indices, UUIDs or bus ids, comma separated), ``--version``.
* failure mode: the driver message below on stdout, exit 9; zero GPUs: ``No devices were found``,
  exit 6.
* no arguments: a short summary table (its layout is not byte-compatible; nothing parses it).

Processes hold GPU memory as CUDA contexts do: ``ringtrain.sim.gpus.hold_memory`` writes
``gpu-procs/<pid>.json`` next to the state file (GPU index, MiB, release delay). While that PID
lives, its MiB count in ``memory.used`` and it is a compute app; once it has exited, the memory
stays used for its release delay (a driver tearing a dead process's context down), counted from
the first call that saw it gone, then the entry is removed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

try:
    from ringtrain.sim import fake_gpu_health as health
except ImportError:  # copied to <state_dir>/bin beside it and run with -IS: import it from there
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fake_gpu_health as health  # type: ignore[no-redef,import-not-found]

DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
NO_DEVICES = "No devices were found\n"
STATE_ENV = "RINGTRAIN_SIM_GPU_STATE"

# canonical field -> (key in a GPU's state, unit shown with values and in the header)
_FIELDS: dict[str, tuple[str, str]] = {
    "timestamp": ("timestamp", ""),
    "driver_version": ("driver_version", ""),
    "count": ("count", ""),
    "index": ("index", ""),
    "name": ("name", ""),
    "uuid": ("uuid", ""),
    "serial": ("serial", ""),
    "pci.bus_id": ("pci_bus_id", ""),
    "pstate": ("pstate", ""),
    "compute_cap": ("compute_cap", ""),
    "memory.total": ("memory_total", "MiB"),
    "memory.used": ("memory_used", "MiB"),
    "memory.free": ("memory_free", "MiB"),
    "utilization.gpu": ("utilization_gpu", "%"),
    "utilization.memory": ("utilization_memory", "%"),
    "temperature.gpu": ("temperature_gpu", ""),
    "power.draw": ("power_draw", "W"),
    "power.limit": ("power_limit", "W"),
}
_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
    "pci.bus": "pci.bus_id",
}
# --query-compute-apps: field -> (header, key in an app row: the holder's or its GPU's)
_APP_FIELDS = {"pid": ("pid", "pid"), "process_name": ("process_name", "process_name"),
               "name": ("process_name", "process_name"), "gpu_uuid": ("gpu_uuid", "uuid"),
               "gpu_name": ("gpu_name", "name"), "gpu_bus_id": ("gpu_bus_id", "pci_bus_id"),
               "gpu_serial": ("gpu_serial", "serial"),
               "used_memory": ("used_gpu_memory [MiB]", "used_mib"),
               "used_gpu_memory": ("used_gpu_memory [MiB]", "used_mib")}
PROCS_DIR = "gpu-procs"


def _value(gpu: dict[str, Any], state: dict[str, Any], field: str, units: bool) -> str:
    if field in health.HEALTH:
        return health.health_value(gpu, field)
    key, unit = _FIELDS[field]
    if key == "timestamp":
        now = time.time()
        value: Any = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + (
            f".{int(now % 1 * 1000):03d}"
        )
    elif key == "driver_version":
        value = state["driver_version"]
    elif key == "count":
        value = len(state["gpus"])
    elif key == "memory_free":
        value = gpu["memory_total"] - gpu["memory_used"]
    else:
        value = gpu[key]
    if isinstance(value, float):
        value = f"{value:.2f}"
    return f"{value} {unit}" if unit and units else str(value)


def _query(
    fields_arg: str, fmt: str, gpus: list[dict[str, Any]], state: dict[str, Any]
) -> tuple[str, int]:
    fields = []
    for raw in fields_arg.split(","):
        name = _ALIASES.get(raw.strip(), raw.strip())
        if name not in _FIELDS and name not in health.HEALTH:
            return f'Field "{raw.strip()}" is not a valid field to query.\n\n', 2
        fields.append(name)
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        return '"--format" option must be "csv".\n', 2
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(f"{f} [{_FIELDS[f][1]}]" if _FIELDS.get(f, ("", ""))[1] else f
                               for f in fields))
    units = "nounits" not in opts
    lines.extend(", ".join(_value(g, state, f, units) for f in fields) for g in gpus)
    return "".join(line + "\n" for line in lines), 0


def _query_apps(fields_arg: str, fmt: str, apps: list[dict[str, Any]]) -> tuple[str, int]:
    fields = []
    for raw in fields_arg.split(","):
        if raw.strip() not in _APP_FIELDS:
            return f'Field "{raw.strip()}" is not a valid field to query.\n\n', 2
        fields.append(_APP_FIELDS[raw.strip()])
    opts = fmt.split(",")
    lines = [] if "noheader" in opts else [", ".join(head for head, _ in fields)]
    unit = "" if "nounits" in opts else " MiB"
    lines += [", ".join(f"{app[key]}{unit}" if key == "used_mib" else str(app[key])
                        for _, key in fields) for app in apps]
    return "".join(line + "\n" for line in lines), 0


def _select(gpus: list[dict[str, Any]], ids: str | None) -> list[dict[str, Any]] | None:
    if ids is None:
        return gpus
    chosen = []
    for raw in ids.split(","):
        ident = raw.strip()
        match = [g for g in gpus if ident in (str(g["index"]), g["uuid"], g["pci_bus_id"])]
        if not match:
            return None
        chosen.extend(match)
    return chosen


def _summary(gpus: list[dict[str, Any]], state: dict[str, Any]) -> str:
    def row(text: str) -> str:
        return f"| {text:<85} |\n"

    bar = "+" + "-" * 87 + "+\n"
    drv, cuda = state["driver_version"], state["cuda_version"]
    out = [time.strftime("%a %b %d %H:%M:%S %Y") + "\n", bar,
           row(f"NVIDIA-SMI {drv:<22}Driver Version: {drv:<14}CUDA Version: {cuda}"), bar]
    for g in gpus:
        mem = f"{g['memory_used']}MiB / {g['memory_total']}MiB"
        out.append(row(f"{g['index']:>3}  {g['name'][:28]:<28} {g['pci_bus_id']:<16} "
                       f"{g['temperature_gpu']:>3}C {g['pstate']:<3} {mem:>20} "
                       f"{g['utilization_gpu']:>3}%"))
    out.append(bar)
    return "".join(out)


def _parse(argv: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg.startswith("--") and "=" in arg:
            key, _, val = arg.partition("=")
            opts[key] = val
        elif arg in ("--query-gpu", "--query-compute-apps", "--query-remapped-rows", "--format",
                     "-i", "--id"):
            opts[arg] = next(it, "")
        else:
            opts[arg] = ""
    if "-i" in opts:
        opts["--id"] = opts.pop("-i")
    return opts


def _version(state: dict[str, Any]) -> str:
    drv = state["driver_version"]
    return (f"NVIDIA-SMI version  : {drv}\nNVML version        : {drv.rsplit('.', 1)[0]}\n"
            f"DRIVER version      : {drv}\nCUDA Version        : {state['cuda_version']}\n")


def render(argv: list[str], state: dict[str, Any] | None) -> tuple[str, int]:
    """What the real nvidia-smi would print for ``argv`` on a host in ``state``: (stdout, rc)."""
    if state is None or state.get("mode") == "fail":
        return DRIVER_FAILED, 9
    opts = _parse(argv)
    if "--version" in opts:
        return _version(state), 0
    if not state["gpus"]:
        return NO_DEVICES, 6
    return _render_gpus(opts, state)


def _render_gpus(opts: dict[str, str], state: dict[str, Any]) -> tuple[str, int]:
    gpus = _select(state["gpus"], opts.get("--id"))
    if gpus is None:
        return NO_DEVICES, 6
    if "--query-gpu" in opts or "--query-compute-apps" in opts:
        return _render_query(opts, gpus, state)
    answer = health.render(opts, gpus, state)
    if answer is not None:
        return answer
    if "-L" in opts or "--list-gpus" in opts:
        return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus), 0
    if any(a.startswith("-") for a in opts):
        return ("\nInvalid combination of input arguments. "
                "Please run 'nvidia-smi -h' for help.\n\n"), 2
    return _summary(gpus, state), 0


def _render_query(
    opts: dict[str, str], gpus: list[dict[str, Any]], state: dict[str, Any]
) -> tuple[str, int]:
    fmt = opts.get("--format", "")
    if "csv" not in fmt.split(","):
        return '"--format=csv" is required with "--query-gpu" and "--query-compute-apps".\n', 2
    if "--query-compute-apps" in opts:
        indices = {g["index"] for g in gpus}
        apps = [a for a in state.get("apps", []) if a["index"] in indices]
        return _query_apps(opts["--query-compute-apps"], fmt, apps)
    return _query(opts["--query-gpu"], fmt, gpus, state)


def load_state() -> dict[str, Any] | None:
    path_str = os.environ.get(STATE_ENV)
    path = (Path(path_str) if path_str else
            Path(__file__).resolve().parent.parent / "hosts" / socket.gethostname() / "gpu.json")
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    apply_holders(state, path.parent / PROCS_DIR, time.time())
    return state


def apply_holders(state: dict[str, Any], procs: Path, now: float) -> None:
    """Add the memory that processes hold (or held until lately) to ``state``'s GPUs, and list
    the living holders as its compute apps."""
    by_index = {g["index"]: g for g in state.get("gpus", [])}
    apps = state.setdefault("apps", [])
    for entry in sorted(procs.glob("*.json")) if procs.is_dir() else ():
        try:
            held = json.loads(entry.read_text())
            pid, gpu, mib = int(entry.stem), by_index[int(held["gpu"])], int(held["mib"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid):
            apps.append({**gpu, "pid": pid, "process_name": held.get("name", "python"),
                         "used_mib": mib})
        elif "dead_at" not in held:
            held["dead_at"] = now
            tmp = entry.with_name(f".{entry.name}.{os.getpid()}")
            tmp.write_text(json.dumps(held))
            tmp.replace(entry)
        elif now >= float(held["dead_at"]) + float(held.get("release_s", 0)):
            entry.unlink(missing_ok=True)
            continue
        gpu["memory_used"] = min(gpu["memory_total"], gpu["memory_used"] + mib)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (its memory is freed once it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def main() -> int:
    if os.path.basename(sys.argv[0]) == "dmesg":  # the same file stands in for the kernel log
        sys.stdout.write(health.dmesg(load_state()))
        return 0
    out, rc = render(sys.argv[1:], load_state())
    sys.stdout.write(out)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
