"""Pure parsers for the probe script's output, and the values they build.

Input is text exactly as the tools print it (nvidia-smi CSV, ``mpirun --version``,
``ip -o addr show``); golden files of real outputs live in tests/unit/golden/probe/.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import re
from dataclasses import dataclass, field, replace

from ringtrain.probe.doctor_parse import HostHealth, parse_doctor
from ringtrain.probe.sections import INT_RE, NO_VALUE, clip, host_lines, split_sections

SECTIONS = ("host", "gpu", "python", "mpi", "net")

_UNSUPPORTED = NO_VALUE
_LIMIT = 2**53  # numbers nvidia-smi prints are far below; anything above is garbage, not a value
# Lines where nvidia-smi says a GPU it knows of could not be read: it fell off the bus, is lost,
# needs a reset. nvidia-smi may still exit 0 and print the other GPUs' rows beside them, e.g.
# "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error".
_LOST_RE = re.compile(
    r"device handle|gpu is lost|fallen off the bus|requires? (?:a )?reset|recover this gpu",
    re.IGNORECASE)
_SHOWN_LINES = 10
_NVSMI_EXIT = {
    2: "invalid argument",
    3: "operation not available on this GPU",
    4: "no permission",
    6: "query unsuccessful",
    9: "NVIDIA driver is not loaded",
    12: "NVML shared library not found",
    14: "infoROM is corrupted",
    15: "a GPU has fallen off the bus",
    18: "NVIDIA driver/library version mismatch",
    124: "timed out (a hung driver?)",
}
_IP_RE = re.compile(
    r"^\d+:\s+(?P<name>[^\s@]+)(?:@\S+)?\s+(?P<fam>inet6?)\s+(?P<addr>[0-9A-Fa-f.:]+)"
    r"(?:/(?P<plen>\d+))?(?:\s+peer\s+\S+?/(?P<peerlen>\d+))?(?P<rest>.*)$"
)


class GpuStatus(enum.Enum):
    OK = "ok"
    NO_GPUS = "no-gpus"  # nvidia-smi works but sees no device
    NOT_INSTALLED = "not-installed"  # no nvidia-smi on PATH (exit 127)
    FAILED = "failed"  # nvidia-smi ran and failed (driver not loaded, mismatch, lost GPU)
    NOT_PROBED = "not-probed"


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_pct: int | None
    problem: str | None = None  # a field nvidia-smi reported as an error, e.g. [Unknown Error]

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True, slots=True)
class GpuQuery:
    status: GpuStatus
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    message: str | None = None  # what nvidia-smi printed besides GPU rows, one line
    # nvidia-smi's own lines about GPUs it could not read (fallen off the bus, lost, needing a
    # reset): each is a GPU missing from ``gpus``, even when nvidia-smi exited 0
    lost: tuple[str, ...] = ()

    @property
    def healthy(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.ok)


@dataclass(frozen=True, slots=True)
class Versions:
    python: str | None = None
    tensorflow: str | None = None
    tensorflow_dist: str | None = None  # tensorflow, tensorflow-cpu or tensorflow-gpu
    horovod: str | None = None
    mpi4py: str | None = None
    mpi: str | None = None  # "Open MPI 4.1.4", "MPICH 4.0.2", "Intel MPI 2021.6"
    error: str | None = None
    cudnn: str | None = None  # "nvidia-cudnn-cu12" (pip), "system" (a libcudnn), None: none seen
    cudnn_version: str | None = None  # the pip distribution's version, or a libcudnn's major
    tf_cudnn: str | None = None  # "nvidia-cudnn-cu12==8.9.4.25": what TF's and-cuda extra pins
    horovod_nccl: bool | None = None  # Horovod's TF ops built with NCCL; None: not known
    sim_cpu_training: bool = False  # the simulated cluster declares its GPUs train on the CPU
    # the ranks' own ringtrain: its version, "" where that Python has none, "unimportable"
    # where importing it failed; None: not reported. Its control protocol (rank/events.py).
    ringtrain: str | None = None
    ringtrain_protocol: int | None = None

    def items(self) -> tuple[tuple[str, str | None], ...]:
        """The versions that must agree across hosts, by package name."""
        return (("python", self.python), ("tensorflow", self.tensorflow),
                ("horovod", self.horovod), ("mpi4py", self.mpi4py), ("mpi", self.mpi))


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    address: str
    prefixlen: int
    scope: str = "global"

    @property
    def ip(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return ipaddress.ip_interface(f"{self.address}/{self.prefixlen}")

    @property
    def version(self) -> int:
        return self.ip.version

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Everything one host answered. ``reachable`` False: ``error`` says why (SSH-level)."""

    host: str
    reachable: bool
    error: str | None = None
    hostname: str | None = None
    gpu: GpuQuery = field(default_factory=lambda: GpuQuery(GpuStatus.NOT_PROBED))
    versions: Versions = field(default_factory=Versions)
    interfaces: tuple[Interface, ...] = ()
    duration_s: float = 0.0
    health: HostHealth | None = None  # the doctor's sections (None: the host sent none)

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self.gpu.gpus

    @property
    def driver_version(self) -> str | None:
        return self.gpu.driver_version


@dataclass(frozen=True, slots=True)
class ProbeReport:
    results: tuple[ProbeResult, ...]

    def result(self, host: str) -> ProbeResult:
        for r in self.results:
            if r.host == host:
                return r
        raise KeyError(host)

    @property
    def unreachable(self) -> tuple[ProbeResult, ...]:
        return tuple(r for r in self.results if not r.reachable)


def parse_nvidia_smi(text: str, exit_code: int | None) -> GpuQuery:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,
    driver_version --format=csv,noheader,nounits`` output (stdout and stderr together)."""
    if exit_code == 127:
        return GpuQuery(GpuStatus.NOT_INSTALLED, message="nvidia-smi not found on PATH")
    gpus: list[Gpu] = []
    other: list[str] = []
    driver: str | None = None
    for line in (ln.strip() for ln in host_lines(text)):  # the re-check reads it unsplit
        gpu, drv = _parse_gpu_row(line) if line else (None, None)
        if gpu is not None:
            gpus.append(gpu)
            driver = driver or drv
        elif line:
            other.append(clip(line))
    lost = tuple(ln for ln in other if _LOST_RE.search(ln))[:64]
    if len(other) > _SHOWN_LINES:
        other[_SHOWN_LINES:] = [f"({len(other) - _SHOWN_LINES} more lines)"]
    said = "; ".join(other)
    if exit_code not in (0, None) or (exit_code is None and not gpus):
        meaning = _NVSMI_EXIT.get(exit_code or 0, "")
        what = f"nvidia-smi failed (exit {exit_code}{': ' + meaning if meaning else ''})"
        if "No devices were found" in said and not gpus:
            return GpuQuery(GpuStatus.NO_GPUS, message="nvidia-smi: No devices were found")
        return GpuQuery(GpuStatus.FAILED, tuple(gpus), driver,
                        f"{what}: {said}" if said else what, lost)
    if not gpus:
        if lost:  # every GPU it knows of is unreadable: not "no GPUs", a failure
            return GpuQuery(GpuStatus.FAILED, message=f"nvidia-smi could not read any GPU: {said}",
                            lost=lost)
        return GpuQuery(GpuStatus.NO_GPUS, message=said or "nvidia-smi listed no GPUs")
    return GpuQuery(GpuStatus.OK, tuple(gpus), driver, said or None, lost)


def _parse_gpu_row(line: str) -> tuple[Gpu | None, str | None]:
    raw = line.split(",")
    fields = [f.strip() for f in raw]
    if len(fields) < 7 or not INT_RE.fullmatch(fields[0]):
        return None, None
    name = ",".join(raw[1:-5]).strip()
    uuid, total, used, util, driver = fields[-5:]
    problems: list[str] = []
    values = []
    for label, text in (("memory.total", total), ("memory.used", used),
                        ("utilization.gpu", util)):
        value, problem = _number(label, text)
        values.append(value)
        if problem:
            problems.append(problem)
    for label, text in (("name", name), ("uuid", uuid)):
        if text.startswith("[") and text not in _UNSUPPORTED:
            problems.append(f"{label} {clip(text, 60)}")
    gpu = Gpu(int(fields[0]), name, uuid, values[0], values[1], values[2],
              "; ".join(problems) or None)
    return gpu, (None if driver in _UNSUPPORTED or driver.startswith("[") else driver)


def _number(label: str, raw: str) -> tuple[int | None, str | None]:
    """A MiB or % field -> (value, None), (None, None) when not supported, or (None, problem):
    an error nvidia-smi printed ("[Unknown Error]", "[GPU requires reset]") or a value no
    working GPU reports (inf, nan, negative, absurdly large)."""
    if raw in _UNSUPPORTED:
        return None, None
    if raw.startswith("["):
        return None, f"{label} {clip(raw, 60)}"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value < _LIMIT):
        return None, f"{label} unreadable ({clip(raw, 40)!r})"
    return int(value), None


def parse_python_versions(text: str, exit_code: int | None, python: str = "python") -> Versions:
    """Lines ``name version`` (``-`` when not installed) printed by the probe's Python."""
    if exit_code == 127:
        return Versions(error=f"python not found at {python} on this host: pass --python")
    if exit_code != 0:
        tail = text.strip().splitlines()[-1:] or ["no output"]
        return Versions(error=f"{python} failed (exit {exit_code}): {clip(tail[0])}")
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            found[parts[0]] = None if parts[1] == "-" else parts[1]
    tf_dist = next((d for d in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu")
                    if found.get(d)), None)
    return Versions(
        python=found.get("python"),
        tensorflow=found.get(tf_dist) if tf_dist else None,
        tensorflow_dist=tf_dist,
        horovod=found.get("horovod"),
        mpi4py=found.get("mpi4py"),
        cudnn=found.get("cudnn"),
        cudnn_version=found.get("cudnn-version"),
        tf_cudnn=found.get("tf-cudnn"),
        horovod_nccl={"yes": True, "no": False}.get(found.get("horovod-nccl") or ""),
        sim_cpu_training=found.get("sim-cpu-training") == "yes",
        ringtrain=(found.get("ringtrain") or "") if "ringtrain" in found else None,
        ringtrain_protocol=_small_int(found.get("ringtrain-protocol")),
    )


def _small_int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) < 6 else None


# (mark, the version after it, label); "Intel(R) MPI Library.*?Version" as one pattern read the
# rest of the text again from each mark: 10 s for 160 KB of marks
_MPI_VERSIONS = (
    ("mpirun (Open MPI) ", re.compile(r"(\S{1,64})"), "Open MPI"),  # right after the mark
    ("Intel(R) MPI Library", re.compile(r".*?Version (\S{1,64})", re.S), "Intel MPI"),
    ("HYDRA build details:", re.compile(r".*?Version:\s{1,64}(\S{1,64})", re.S), "MPICH"),
)


def parse_mpirun_version(text: str, exit_code: int | None) -> str | None:
    """``mpirun --version`` -> "Open MPI 4.1.4" (or MPICH / Intel MPI); None when absent."""
    if exit_code == 127:
        return None
    for mark, version, label in _MPI_VERSIONS:
        at = text.find(mark)  # the first mark, then the first version after it: one pass
        m = version.match(text, at + len(mark)) if at >= 0 else None
        if m:
            return f"{label} {m.group(1)}"
    first = text.strip().splitlines()[:1]
    return f"unknown ({first[0][:60]})" if first else None


def parse_ip_addr(text: str) -> tuple[Interface, ...]:
    """``ip -o addr show`` lines -> interfaces with addresses (IPv4 and IPv6)."""
    found: list[Interface] = []
    for line in text.splitlines():
        m = _IP_RE.match(line.strip())
        if not m:
            continue
        plen = m.group("plen") or m.group("peerlen")
        default = 32 if m.group("fam") == "inet" else 128
        scope = re.search(r"\bscope (\S+)", m.group("rest"))
        if not _ifname_ok(m.group("name")) or (plen and not INT_RE.fullmatch(plen)):
            continue
        try:
            iface = Interface(m.group("name"), m.group("addr"), int(plen or default),
                              scope.group(1) if scope else "global")
            iface.ip  # noqa: B018 - validates address and prefix
        except ValueError:
            continue
        found.append(iface)
    return tuple(found)


def _ifname_ok(name: str) -> bool:
    """What Linux accepts as an interface name (dev_valid_name): 1-15 bytes, no '/', ':' or
    whitespace, not '.' or '..'. Anything else is not an interface, whatever the line says."""
    return (0 < len(name.encode("utf-8", "replace")) <= 15 and name not in (".", "..")
            and not any(c in name for c in "/:") and not any(c.isspace() for c in name))


def parse_probe_output(host: str, text: str, python: str = "python",
                       duration_s: float = 0.0) -> ProbeResult:
    """The whole probe script's stdout -> ProbeResult for a host that answered."""
    sections = split_sections(text)
    missing = [s for s in SECTIONS if s not in sections or sections[s].exit_code is None]
    if not any(s in sections for s in SECTIONS):
        return ProbeResult(host, True, "probe printed nothing readable: is /bin/sh a POSIX "
                           "shell and does the login print to stdout?", duration_s=duration_s)
    error = (f"probe output incomplete (cut off before the end of: {', '.join(missing)}); "
             "the host may be overloaded or a command hung") if missing else None

    def body(name: str) -> tuple[str, int | None]:
        s = sections.get(name)
        return (s.body, s.exit_code) if s else ("", None)

    versions = parse_python_versions(*body("python"), python=python)
    mpi_text, mpi_rc = body("mpi")
    host_text, _ = body("host")
    return ProbeResult(
        host=host,
        reachable=True,
        error=error,
        hostname=next(iter(host_text.strip().splitlines()), None),
        gpu=parse_nvidia_smi(*body("gpu")) if "gpu" in sections else GpuQuery(
            GpuStatus.NOT_PROBED),
        versions=replace(versions, mpi=parse_mpirun_version(mpi_text, mpi_rc)),
        interfaces=parse_ip_addr(body("net")[0]),
        duration_s=duration_s,
        health=parse_doctor(sections),
    )

