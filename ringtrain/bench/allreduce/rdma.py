"""Detect RDMA: verbs devices (/sys/class/infiniband) and UCX transports (``ucx_info -d``).

The report prints ``RDMA: not available on this machine (reason)`` when nothing usable is found,
and never a number for it. When an active verbs port exists, the suite adds an mpi4py ring run
over Open MPI's UCX PML (``-mca pml ucx``), labelled ``mpi4py-ucx``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SYS_IB = Path("/sys/class/infiniband")
RDMA_TLS = ("rc", "rc_verbs", "rc_mlx5", "dc", "dc_mlx5", "ud", "ud_verbs", "ud_mlx5")


@dataclass(frozen=True, slots=True)
class Port:
    device: str
    port: str
    state: str
    link_layer: str


@dataclass(frozen=True, slots=True)
class RdmaInfo:
    ports: tuple[Port, ...]
    ucx_transports: tuple[str, ...]
    ucx_info: str  # "absent" or the path of ucx_info
    reason: str

    @property
    def available(self) -> bool:
        active = any(p.state.endswith("ACTIVE") for p in self.ports)
        return active and any(t in RDMA_TLS for t in self.ucx_transports)

    @property
    def summary(self) -> str:
        if self.available:
            names = ", ".join(f"{p.device}:{p.port} ({p.link_layer})" for p in self.ports)
            return (f"available ({names}; UCX: {', '.join(self.ucx_transports)}), not measured: "
                    "this suite pins TCP (pml ob1, btl tcp) so every cell compares the same "
                    "transport")
        return f"not available on this machine ({self.reason})"

    def as_dict(self) -> dict[str, Any]:
        return {"available": self.available, "summary": self.summary,
                "ports": [asdict(p) for p in self.ports],
                "ucx_transports": list(self.ucx_transports), "ucx_info": self.ucx_info}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "?"


def verbs_ports(root: Path = SYS_IB) -> tuple[Port, ...]:
    if not root.is_dir():
        return ()
    ports = []
    for dev in sorted(root.iterdir()):
        for port in sorted((dev / "ports").glob("*")):
            ports.append(Port(dev.name, port.name, _read(port / "state"),
                              _read(port / "link_layer")))
    return tuple(ports)


def parse_ucx_transports(text: str) -> tuple[str, ...]:
    """Transport names from ``ucx_info -d`` output (``#      Transport: rc_verbs`` lines)."""
    names = []
    for line in text.splitlines():
        _, sep, rest = line.partition("Transport:")
        if sep and rest.strip():
            names.append(rest.strip())
    return tuple(dict.fromkeys(names))


def ucx_transports() -> tuple[tuple[str, ...], str]:
    exe = shutil.which("ucx_info")
    if exe is None:
        return (), "absent"
    try:
        out = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("ucx_info -d failed: %s", err)
        return (), exe
    return parse_ucx_transports(out), exe


def detect(root: Path = SYS_IB) -> RdmaInfo:
    ports = verbs_ports(root)
    tls, exe = ucx_transports()
    reasons = []
    if not ports:
        reasons.append(f"no verbs devices: {root} is missing or empty")
    elif not any(p.state.endswith("ACTIVE") for p in ports):
        reasons.append("no verbs port is ACTIVE")
    if exe == "absent":
        reasons.append("ucx_info is not installed")
    elif not any(t in RDMA_TLS for t in tls):
        reasons.append(f"UCX offers no RDMA transport (only {', '.join(tls) or 'none'})")
    return RdmaInfo(ports, tls, exe, "; ".join(reasons) or "ok")
