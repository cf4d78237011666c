"""Per-host fakes: the GPU state read by the fake nvidia-smi, and fake software versions.

GPU state: ``hosts/<host>/gpu.json`` (see fake_nvidia_smi.py). UUIDs, serials and bus ids are
derived from cluster, host, index and model, so they are stable across ``up`` and distinct
across hosts, like real ones.

Fake versions (``set_versions``): every sim host's sshd sets ``PYTHONPATH=hosts/<host>/site``
(empty by default). ``set_versions(cfg, 'gpu03', horovod='0.27.0')`` writes
``site/horovod-0.27.0.dist-info/METADATA`` there; ``importlib.metadata.version('horovod')`` run
over ssh on gpu03 then answers 0.27.0 because PYTHONPATH comes before site-packages on
``sys.path``. Only the metadata is faked: ``import horovod`` still loads the real package, which is
what a host with a stale install looks like to a version probe. The key ``mpirun`` is special: it
puts an ``mpirun`` wrapper first on that host's PATH that answers ``--version`` with
``mpirun (Open MPI) <version>`` and runs the real mpirun otherwise. Takes effect for the next
ssh session; no restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringtrain.errors import SimError
from ringtrain.sim.fake_nvidia_smi import PROCS_DIR, STATE_ENV

log = logging.getLogger(__name__)

DRIVER_VERSION = "535.104.05"
CUDA_VERSION = "12.2"

# name as nvidia-smi prints it -> (memory.total MiB, power.limit W, compute capability)
GPU_MODELS: dict[str, tuple[int, float, str]] = {
    "NVIDIA H100 80GB HBM3": (81559, 700.0, "9.0"),
    "NVIDIA H100 PCIe": (81559, 350.0, "9.0"),
    "NVIDIA H200": (143771, 700.0, "9.0"),
    "NVIDIA A100-SXM4-80GB": (81920, 400.0, "8.0"),
    "NVIDIA A100-SXM4-40GB": (40960, 400.0, "8.0"),
    "NVIDIA A10": (23028, 150.0, "8.6"),
    "NVIDIA L4": (23034, 72.0, "8.9"),
    "NVIDIA L40S": (46068, 350.0, "8.9"),
    "Tesla V100-SXM2-32GB": (32768, 300.0, "7.0"),
    "Tesla V100-SXM2-16GB": (16160, 300.0, "7.0"),
    "Tesla T4": (15360, 70.0, "7.5"),
}
# DGX H100 bus ids; beyond eight GPUs we continue the pattern.
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,63}$")
_DIST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")
MPIRUN_KEY = "mpirun"


def check_model(model: str) -> str:
    if not _MODEL_RE.match(model):
        raise SimError(f"GPU model {model!r} has characters nvidia-smi never prints",
                       hint="use letters, digits, spaces and ._()- e.g. 'NVIDIA A100-SXM4-80GB'")
    return model


def _memory_of(model: str) -> tuple[int, float, str]:
    if model in GPU_MODELS:
        return GPU_MODELS[model]
    found = re.search(r"(\d+)\s*GB", model)
    return (int(found.group(1)) * 1024 if found else 16384, 300.0, "8.0")


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def make_gpu(cluster: str, host: str, index: int, model: str) -> dict[str, Any]:
    memory, power_limit, cc = _memory_of(model)
    h = _digest(cluster, host, index, model)
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else f"{0xE0 + index - len(_BUS_IDS):02X}"
    return {
        "index": index,
        "name": model,
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "serial": str(1650000000000 + int(h[32:42], 16) % 10**10),
        "pci_bus_id": f"00000000:{bus}:00.0",
        "pstate": "P0",
        "compute_cap": cc,
        "memory_total": memory,
        "memory_used": 0,
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "temperature_gpu": 28 + int(h[42:44], 16) % 9,
        "power_draw": round(68.0 + int(h[44:48], 16) % 900 / 100, 2),
        "power_limit": power_limit,
    }


def make_state(cluster: str, host: str, count: int, model: str, mode: str = "ok") -> dict[str, Any]:
    return {
        "mode": mode,
        "model": model,
        "driver_version": DRIVER_VERSION,
        "cuda_version": CUDA_VERSION,
        "gpus": [make_gpu(cluster, host, i, model) for i in range(count)],
    }


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state


def write_state(path: Path, state: Mapping[str, Any]) -> None:
    """Atomic: a concurrent nvidia-smi sees the old or the new state, never half of one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(path)


def updated_state(
    state: Mapping[str, Any] | None, cluster: str, host: str, count: int | str, model: str | None,
    default_model: str,
) -> dict[str, Any]:
    """``count``: a GPU count, ``'fail'`` (driver broken, GPUs kept) or ``'ok'`` (driver back)."""
    old = dict(state) if state else make_state(cluster, host, 0, default_model)
    new_model = check_model(model) if model else str(old.get("model", default_model))
    mode = str(old.get("mode", "ok"))
    n = len(old.get("gpus", []))
    if count == "fail":
        mode = "fail"
    elif count == "ok":
        mode = "ok"
    elif isinstance(count, int) and 0 <= count <= 16:
        n, mode = count, "ok"
    else:
        raise SimError(f"set-gpus {host} {count!r}: expected a count 0-16, 'fail' or 'ok'",
                       hint=f"e.g. ringtrain sim set-gpus {host} 2, or ... {host} fail")
    return make_state(cluster, host, n, new_model, mode)


def parse_count(text: str) -> int | str:
    text = text.strip().lower()
    if text in ("fail", "ok"):
        return text
    if text.isdigit():
        return int(text)
    raise SimError(f"{text!r} is not a GPU count, 'fail' or 'ok'",
                   hint="e.g. ringtrain sim set-gpus gpu03 2")


def _norm(dist: str) -> str:
    """A distribution name as dist-info directories spell it (PEP 503 runs to '_')."""
    return re.sub(r"[-_.]+", "_", dist).lower()


def _dist_dir_name(dist: str, version: str) -> str:
    return f"{_norm(dist)}-{version}.dist-info"


def set_fake_versions(site_dir: Path, bin_dir: Path, versions: Mapping[str, str | None]) -> None:
    """Fake ``dist -> version`` on one host; ``None`` removes that fake."""
    for dist, version in versions.items():
        if not _DIST_RE.match(dist):
            raise SimError(f"{dist!r} is not a distribution name",
                           hint="e.g. horovod, tensorflow-cpu")
        if version is not None and not _VERSION_RE.match(version):
            raise SimError(f"{version!r} is not a version", hint="e.g. 0.27.0")
        if dist == MPIRUN_KEY:
            _set_fake_mpirun(bin_dir, version)
            continue
        norm = _norm(dist)
        for old in site_dir.glob("*.dist-info"):
            if old.name.split("-", 1)[0] == norm:
                shutil.rmtree(old)
        if version is not None:
            meta = site_dir / _dist_dir_name(dist, version)
            meta.mkdir(parents=True)
            (meta / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                "Summary: ringtrain sim fake version\n"
            )
        log.info("fake %s version on %s: %s", dist, site_dir.parent.name, version)


def _set_fake_mpirun(bin_dir: Path, version: str | None) -> None:
    wrapper = bin_dir / "mpirun"
    if version is None:
        wrapper.unlink(missing_ok=True)
        return
    real = shutil.which("mpirun") or "/usr/bin/mpirun"
    wrapper.write_text(
        "#!/bin/sh\n# ringtrain sim: fake Open MPI version, real mpirun otherwise\n"
        'case "$1" in --version|-V)\n'
        f"  printf 'mpirun (Open MPI) {version}\\n\\n"
        "Report bugs to http://www.open-mpi.org/community/help/\\n'; exit 0;;\nesac\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)


def fake_versions(site_dir: Path, bin_dir: Path) -> dict[str, str]:
    """The fakes in place on one host: ``{dist: version}``."""
    found: dict[str, str] = {}
    for meta in sorted(site_dir.glob("*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1) for line in meta.read_text().splitlines() if ": " in line
        )
        found[fields.get("Name", meta.parent.name)] = fields.get("Version", "?")
    wrapper = bin_dir / "mpirun"
    if wrapper.exists():
        m = re.search(r"Open MPI\) ([^\\]+)\\n", wrapper.read_text())
        found[MPIRUN_KEY] = m.group(1) if m else "?"
    return found


def hold_memory(gpu: int, mib: int, release_s: float = 0.0, *, name: str = "python") -> Path:
    """Hold ``mib`` of fake GPU ``gpu`` from this process, as its CUDA context would: from a
    process on a simulated host (a rank), whose sshd put ``$RINGTRAIN_SIM_GPU_STATE`` in its
    environment. The memory stays used ``release_s`` after the process exits (a driver freeing
    a dead process's context); see fake_nvidia_smi.py. Returns the holder's file."""
    state = os.environ.get(STATE_ENV)
    if not state:
        raise SimError(f"${STATE_ENV} is not set: not a process on a simulated host",
                       hint="call hold_memory from a rank that runs on a ringtrain sim host")
    procs = Path(state).parent / PROCS_DIR
    procs.mkdir(exist_ok=True)
    entry = procs / f"{os.getpid()}.json"
    entry.write_text(json.dumps({"gpu": gpu, "mib": mib, "release_s": release_s, "name": name}))
    return entry


def clear_holders(gpu_state_file: Path) -> None:
    """Forget every process holding one host's fake GPUs (a test's clean-up)."""
    shutil.rmtree(gpu_state_file.parent / PROCS_DIR, ignore_errors=True)
