"""The pre-flight probe: one SSH round trip per host collects GPUs, versions and interfaces.

The remote side is a fixed POSIX sh script (``PROBE_SCRIPT``); the only values passed to it are
the validated Python path and the fixed Python snippet, as positional arguments (``$1``, ``$2``),
never pasted into the script. The script runs from ``/`` (``cd /`` first; a relative Python
path is taken from where it started): its Python sections (the versions, the doctor's jobs
scan) run ``python -c``, which puts the working directory first on ``sys.path``, and a
``sysconfig.py`` planted in the directory ``ringtrain check`` runs from would run in place of
the standard library's, as whoever probes. From ``/``, only root's. Not ``-I``: the versions
are those the ranks will see, ``PYTHONPATH`` and the user's site-packages included (the
simulated cluster's fake versions come by ``PYTHONPATH``); ``-P`` needs Python 3.11. Its
output is a series of delimited sections::

    @@ringtrain:probe 1@@
    @@ringtrain:begin host@@
    gpu01
    @@ringtrain:end 0@@
    @@ringtrain:begin gpu@@          nvidia-smi --query-gpu=... --format=csv,noheader,nounits
    0, NVIDIA A100-SXM4-80GB, GPU-..., 81920, 4, 0, 535.129.03
    @@ringtrain:end 0@@              exit code of the section's command (127: not installed)
    @@ringtrain:begin python@@       "name version" lines; "-" when not installed
    @@ringtrain:begin mpi@@          mpirun --version
    @@ringtrain:begin net@@          ip -o addr show
    @@ringtrain:begin health@@ ...    the doctor's sections (doctor_script: GPU health, compute
                                     apps, PCIe replays, NVLink, topology, Xid, links, jobs)
    @@ringtrain:done@@

Parsing is in ``probe_parse`` (pure, golden-file tested).
"""

from __future__ import annotations

import logging
import sys

from ringtrain.errors import UsageError
from ringtrain.hostfile.model import Inventory
from ringtrain.probe import doctor_script
from ringtrain.probe.probe_parse import (
    Gpu,
    GpuQuery,
    GpuStatus,
    Interface,
    ProbeReport,
    ProbeResult,
    Versions,
    parse_probe_output,
)
from ringtrain.probe.sections import clip
from ringtrain.remote import CmdResult, Remote
from ringtrain.spec import PYTHON_PATH_RE

__all__ = [
    "NVIDIA_SMI_QUERY",
    "PROBE_SCRIPT",
    "Gpu",
    "GpuQuery",
    "GpuStatus",
    "Interface",
    "ProbeReport",
    "ProbeResult",
    "Versions",
    "probe",
    "probe_argv",
]

log = logging.getLogger(__name__)

NVIDIA_SMI_QUERY = (
    "--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,driver_version"
)
NVIDIA_SMI_TIMEOUT_S = 15

# Where a libcudnn of the system is looked for when no pip nvidia-cudnn-cu* is installed (besides
# LD_LIBRARY_PATH): Debian/Ubuntu's and RHEL's library dirs and the CUDA toolkit's.
LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64", "/usr/lib"]
# The simulated cluster's declaration that its fake GPUs train on the CPU (a file that exists)
SIM_CPU_TRAINING_ENV = "RINGTRAIN_SIM_TRAINS_ON_CPU"

# Versions from the installed distributions' directory names (NAME-VERSION.dist-info), looked
# up in sys.path order like importlib.metadata does, without importing it: half the start-up
# time (28 vs 58 ms here), paid on every host. Importing tensorflow would take seconds. The GPU
# stack the same way: TensorFlow's cuDNN (pip's nvidia-cudnn-cu*, else a libcudnn on the
# loader's paths) and whether Horovod's TF op library was built with NCCL (it holds NCCL's
# ncclAllReduce: a search of the mapped file, 0.1-0.2 s for a 60 MB library, no import). Which
# cuDNN TensorFlow was built for is its own word: the nvidia-cudnn-cuNN==X pin of its
# ``and-cuda`` extra in its METADATA (TF 2.14+); a system libcudnn's major from its file name.
VERSIONS_PY = """\
import os, re, sys, sysconfig
print("python %d.%d.%d" % sys.version_info[:3])
paths = sysconfig.get_paths()
pattern = re.compile(r"^([A-Za-z0-9_.-]+?)-([^-]+?)\\.(?:dist|egg)-info$")
found = {}
where = {}
for d in [p for p in sys.path if p] + [paths["purelib"], paths["platlib"]]:
    try:
        entries = os.listdir(d)
    except OSError:
        continue
    for entry in entries:
        m = pattern.match(entry)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            found.setdefault(name, m.group(2))
            where.setdefault(name, os.path.join(d, entry))
for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "horovod", "mpi4py"):
    print(name, found.get(name, "-"))
cudnn = next((n for n in sorted(found) if n.startswith("nvidia-cudnn-cu")), None)
cudnn_v = found.get(cudnn) if cudnn else None
for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") + [sys.prefix + "/lib"] + LIB_DIRS:
    try:
        majors = sorted((e[12:].split(".")[0] for e in os.listdir(d)
                         if e.startswith("libcudnn.so.")), key=lambda v: (len(v), v))
    except OSError:
        continue
    if cudnn is None and majors:
        cudnn, cudnn_v = "system", majors[-1]
print("cudnn", cudnn or "-")
print("cudnn-version", cudnn_v or "-")
want = "-"
tf = next((n for n in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu") if n in where), None)
if tf:
    try:
        with open(os.path.join(where[tf], "METADATA"), encoding="utf-8", errors="replace") as f:
            m = re.search(r"^Requires-Dist: *(nvidia-cudnn-cu[0-9]+) *[(]?==([0-9.]+)", f.read(),
                          re.MULTILINE)
        if m:
            want = m.group(1) + "==" + m.group(2)
    except OSError:
        pass
print("tf-cudnn", want)
nccl = "-"
for d in [p for p in sys.path if p] + [paths["purelib"], paths["platlib"]]:
    lib = os.path.join(d, "horovod", "tensorflow")
    try:
        libs = sorted(e for e in os.listdir(lib) if e.startswith("mpi_lib") and ".so" in e)
    except OSError:
        continue
    if libs:
        import mmap
        try:
            with open(os.path.join(lib, libs[0]), "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                nccl = "yes" if m.find(b"ncclAllReduce") >= 0 else "no"
                m.close()
        except (OSError, ValueError):
            pass
        break
print("horovod-nccl", nccl)
flag = os.environ.get(SIM_FLAG, "")
print("sim-cpu-training", "yes" if flag and os.path.exists(flag) else "-")
try:
    import ringtrain
    print("ringtrain", str(getattr(ringtrain, "__version__", "unknown")).replace(" ", "_"))
    try:
        from ringtrain.rank import events
        print("ringtrain-protocol", getattr(events, "PROTOCOL", 0))
    except Exception:
        print("ringtrain-protocol", 0)
except ModuleNotFoundError as e:
    print("ringtrain", "-" if e.name == "ringtrain" else "unimportable")
except Exception:
    print("ringtrain", "unimportable")
""".replace("LIB_DIRS", repr(LIB_DIRS)).replace("SIM_FLAG", repr(SIM_CPU_TRAINING_ENV))

PROBE_SCRIPT = f"""\
PY=$1
PYCODE=$2
case $PY in /*) ;; */*) PY=$(pwd -P)/$PY ;; esac
cd / || exit 1
export LC_ALL=C
PATH=$PATH:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
T=
if command -v timeout >/dev/null 2>&1; then T="timeout {NVIDIA_SMI_TIMEOUT_S}"; fi
section() {{
  printf '@@ringtrain:begin %s@@\\n' "$1"
  shift
  if command -v "$1" >/dev/null 2>&1; then
    out=$($T "$@" 2>&1 </dev/null)
    rc=$?
  else
    out="$1: command not found"
    rc=127
  fi
  if [ -n "$out" ]; then printf '%s\\n' "$out"; fi
  printf '@@ringtrain:end %s@@\\n' "$rc"
}}
{doctor_script.FUNCTIONS}echo '@@ringtrain:probe 1@@'
section host uname -n
section gpu nvidia-smi {NVIDIA_SMI_QUERY} --format=csv,noheader,nounits
section python "$PY" -c "$PYCODE"
section mpi mpirun --version
section net ip -o addr show
{doctor_script.SECTIONS}echo '@@ringtrain:done@@'
"""



def probe_argv(python: str) -> tuple[str, ...]:
    """The argv run on every host (over SSH it is shlex-joined for the remote shell)."""
    if not PYTHON_PATH_RE.match(python) or python.startswith("-"):
        raise UsageError(
            f"python path {python!r} has characters that are not allowed",
            "pass --python as a plain path such as /opt/venv/bin/python",
        )
    return ("sh", "-c", PROBE_SCRIPT, "ringtrain-probe", python, VERSIONS_PY,
            doctor_script.JOBS_PY)


def probe(
    inventory: Inventory,
    remote: Remote,
    *,
    python: str | None = None,
    timeout: float = 30.0,
) -> ProbeReport:
    """Probe every host at once; the report holds one ProbeResult per host, in inventory order.

    ``python`` is the interpreter run on each host (default: this launcher's own, assuming a
    shared filesystem or identical install paths).
    """
    py = python or sys.executable
    argv = probe_argv(py)
    answers = remote.run(inventory.hosts, argv, timeout)
    results = tuple(result_from_cmd(h.name, answers.get(h.name), py) for h in inventory.hosts)
    for r in results:
        if r.error:
            log.info("probe %s: %s", r.host, r.error)
    return ProbeReport(results)


def result_from_cmd(host: str, cmd: CmdResult | None, python: str = "python") -> ProbeResult:
    """One host's command result -> ProbeResult (unreachable hosts keep their SSH error)."""
    if cmd is None:
        return ProbeResult(host, False, "no answer from the remote runner")
    if cmd.error is not None:
        return ProbeResult(host, False, cmd.error, duration_s=cmd.duration_s)
    result = parse_probe_output(host, cmd.stdout, python, cmd.duration_s)
    if cmd.exit_code != 0 and result.error is not None:
        tail = (cmd.stderr.strip().splitlines() or ["no error output"])[-1]
        return ProbeResult(host, True, f"probe script failed (exit {cmd.exit_code}): {clip(tail)}",
                           duration_s=cmd.duration_s)
    return result

