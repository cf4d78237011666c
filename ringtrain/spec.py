"""LaunchSpec: everything one launch was asked, each field once, frozen. Pure. Built by
``assembly/launch_spec.build_spec`` (either door) or read back from plan.json (``ringtrain
launch --from runs/<id>``). All after it (``Session``, ``make_plan``, the pre-flight) reads this
value and nothing else the user said: the request, the allocation, pre-flight, supervision and
restart policies, the checkpoint location parsed (``checkpoint.location``).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ringtrain.checkpoint.location import Location
from ringtrain.errors import UsageError
from ringtrain.hostfile.allocate import AllocationPolicy
from ringtrain.hvd_tuning import HorovodTuning
from ringtrain.slurm_options import check_srun_args

SPEC_VERSION = 1


class Backend(enum.Enum):
    """How ranks are started. Values are the names used on the command line."""

    MPIRUN = "mpirun"
    HOROVODRUN = "horovodrun"
    SRUN = "srun"


class Strategy(enum.Enum):
    """How the ranks train together: Horovod's ring all-reduce, or TensorFlow's own
    ``MultiWorkerMirroredStrategy`` or ``ParameterServerStrategy``, each rank a task with its
    ``TF_CONFIG`` (``ringtrain.launch.plan.tfcluster``)."""

    HOROVOD = "horovod"
    TF_MULTIWORKER = "tf-multiworker"
    TF_PS = "tf-ps"


class Entry(enum.Enum):
    """What each rank runs: a Python file (``train.py``), a module (``-m pkg.train``, or
    ``python -m pkg.train`` as horovodrun users type it), or any other program (a wrapper
    script, a binary), which the rank entry starts as its child and supervises."""

    SCRIPT = "script"
    MODULE = "module"
    EXECUTABLE = "executable"


class GpuRule(enum.Enum):
    """``--gpus`` (required), ``--cpu`` (ignored), or neither (auto: required unless no host has
    an NVIDIA driver at all, which is a CPU cluster)."""

    AUTO = "auto"
    REQUIRED = "required"
    IGNORED = "ignored"


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
PYTHON_PATH_RE = re.compile(r"^[A-Za-z0-9_./+@-]+\Z")  # --python: a plain path, no shell
SshTransport = Literal["paramiko", "openssh"]  # --ssh-transport (remote/ssh.py, openssh.py)


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """``--env NAME`` (forward the launcher's value) or ``--env NAME=VALUE`` (set it): a secret
    unless ``plain`` (``--env-plain``; launch/plan/secretvars.py)."""

    name: str
    value: str | None = None
    plain: bool = False

    def __post_init__(self) -> None:  # however it was made: --env, ringtrain.run, plan.json
        if not isinstance(self.name, str) or not _ENV_NAME_RE.match(self.name):
            raise UsageError(
                f"--env: {self.name!r} is not a valid environment variable name",
                "use --env NAME to forward a variable or --env NAME=VALUE to set one",
            )
        if not isinstance(self.plain, bool) or (self.value is not None and (
                not isinstance(self.value, str) or "\0" in self.value)):
            raise UsageError(f"--env {self.name}: its value is not text (or plain not a bool)",
                             "pass --env NAME=VALUE with a text value")

    @classmethod
    def parse(cls, text: str, plain: bool = False) -> EnvSpec:
        name, sep, value = text.partition("=")
        return cls(name=name, value=value if sep else None, plain=plain)


@dataclass(frozen=True, slots=True)
class PreflightSpec:
    """The SSH pre-flight before every attempt (``--no-probe`` turns it off), and the ring
    check before the first (``--ring-check``: every host pair's bandwidth with real MPI
    traffic; a slow host warned about or left out)."""

    enabled: bool = True
    gpus: GpuRule = GpuRule.AUTO
    on_bad_host: Literal["fail", "exclude"] = "fail"
    doctor_actions: tuple[tuple[str, str], ...] = ()  # --on-bad-host CODE=ACTION (probe/doctor)
    require_same_versions: bool = True
    timeout_s: float = 30.0
    ring_check: bool = False
    expect_link_Bps: float | None = None
    slow_ratio: float = 0.5
    on_slow_host: Literal["warn", "exclude"] = "warn"


@dataclass(frozen=True, slots=True)
class SshSpec:
    """How hosts are reached: ssh_config (``-F``), known_hosts, trust on first use, the port
    and key file (``-p``/``-i``, as horovodrun's) of hosts whose inventory line names none,
    and the probe's and teardown's SSH (``--ssh-transport``: paramiko, or OpenSSH's ssh)."""

    config: Path | None = None
    known_hosts: Path | None = None  # mpirun's ssh verifies keys against it too
    accept_new_host_keys: bool = False
    port: int | None = None
    identity_file: str | None = None
    transport: SshTransport = "paramiko"  # checked: assembly/launch_spec.ssh_transport


DEFAULT_STALL_S = 600.0


class StragglerAction(enum.Enum):
    OFF = "off"
    WARN = "warn"
    RESTART_WITHOUT = "restart-without"


@dataclass(frozen=True, slots=True)
class StragglerPolicy:
    """``--on-straggler``: a rank whose own step time (before the all-reduce) stays at least
    ``threshold`` x the median of the other ranks' for ``window_s`` is named (warn), or the job
    restarts from its last checkpoint without that rank's host (restart-without). ``asked``: the
    user chose the action (and is told when no rank reports step times)."""

    action: StragglerAction = StragglerAction.WARN
    threshold: float = 1.5
    window_s: float = 60.0
    asked: bool = False


@dataclass(frozen=True, slots=True)
class SupervisionPolicy:
    """Detection bounds. ``stall_timeout`` None: the default (600 s), applied once a rank
    reports progress; a value means the user asked for stall detection (and is told when no
    rank reports progress). ``exit_grace``: how long ranks that all finished their script may
    take to exit before ringtrain ends the job, which still counts as a success."""

    start_timeout: float = 120.0
    heartbeat_timeout: float = 10.0
    control_hubs: bool | None = None  # per-host hubs (rank/hub.py); None: plan.make.hubs_for
    stall_timeout: float | None = None
    teardown_grace: float = 3.0
    poll_s: float = 0.2
    exit_grace: float = 120.0
    straggler: StragglerPolicy = StragglerPolicy()
    # a Horovod script is told when no rank called hvd.init(); ringtrain's own MPI programs
    # (the ring check) are not Horovod scripts
    expect_hvd_init: bool = True

    @property
    def stall_limit(self) -> float:
        return DEFAULT_STALL_S if self.stall_timeout is None else self.stall_timeout

    @property
    def launcher_timeout(self) -> float:
        """How long a rank waits for the launcher before ending itself (longer than ours)."""
        return self.heartbeat_timeout + 2.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """``--max-restarts`` and ``--min-np``; a failed host sits out ``cooldown_s``; after
    ``stall_restarts`` restarts in a row with no new commit the job stops (a crash loop, as
    NVRx stops after 3); the failed attempt's hosts get ``recheck_timeout_s`` to free GPUs."""

    max_restarts: int = 0
    min_np: int | None = None
    cooldown_s: float = 600.0
    stall_restarts: int = 3
    recheck_timeout_s: float = 15.0


@dataclass(frozen=True, slots=True)
class ElasticPolicy:
    """``--elastic``: Horovod's elastic driver runs ``min_np`` to ``max_np`` ranks on the hosts
    ringtrain's discovery script prints (launch/elastic/spares.py: ``spares`` held back, warm: a
    process per slot waiting, warmspares.py); a failed host sits out ``cooldown_range`` s."""

    min_np: int = 1
    max_np: int | None = None
    cooldown_range: tuple[int, int] = (60, 240)
    timeout_s: int = 600
    spares: int = 0
    warm_spares: bool = True


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything ``ringtrain launch`` was asked, validated for form (not feasibility)."""

    script: str  # a path, a module name (Entry.MODULE) or a program (Entry.EXECUTABLE)
    script_args: tuple[str, ...] = ()
    entry: Entry = Entry.SCRIPT
    mpi_args: tuple[str, ...] = ()  # passed to mpirun as they are (--mpi-arg)
    srun_args: tuple[str, ...] = ()  # srun's own options, the user's (--srun-args)
    hosts_file: str | None = None
    host_spec: str | None = None
    hosts_format: str | None = None
    np: int | None = None
    backend: Backend | None = None  # None: srun inside a Slurm job, else mpirun
    gloo: bool = False
    strategy: Strategy = Strategy.HOROVOD
    tf_port: int = 23456  # TF strategies: a host's tasks listen on tf_port, tf_port + 1, ...
    ps: int = 0  # tf-ps: parameter-server tasks, beside the workers (one per slot) and a chief
    ps_hosts: str = "shared"  # tf-ps: "shared" with the workers' hosts, or "own" (spare hosts)
    env: tuple[EnvSpec, ...] = ()
    runs_dir: Path = Path("runs")
    trust_groups: tuple[str, ...] = ()  # groups trusted to write runs_dir and above (rundir.py)
    working_dir: Path = Path(".")
    python: str | None = None  # on the hosts; None: this interpreter, same path everywhere
    network_interface: str | None = None
    checkpoint: Location | None = None  # None: the run dir's checkpoints/ (Location.default)
    checkpoint_grace: float = 60.0  # seconds a storage outage may last before a skip
    ssh: SshSpec = field(default_factory=SshSpec)
    allocation: AllocationPolicy = field(default_factory=AllocationPolicy)
    preflight: PreflightSpec = field(default_factory=PreflightSpec)
    supervision: SupervisionPolicy = field(default_factory=SupervisionPolicy)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    horovod: HorovodTuning = field(default_factory=HorovodTuning)  # horovodrun's tuning flags
    elastic: ElasticPolicy | None = None  # --elastic: Horovod's elastic driver (launchers.py)
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.hosts_file and self.host_spec:
            raise UsageError(
                "--hosts and -H both given", "pass either an inventory with --hosts or -H h1:N,..."
            )
        if self.python is not None and (not PYTHON_PATH_RE.match(self.python)
                                        or self.python.startswith("-")):
            raise UsageError(
                f"python path {self.python!r} has characters that are not allowed",
                "pass --python as a plain path such as /opt/venv/bin/python",
            )
        if self.np is not None and self.np < 1:
            raise UsageError(f"-np {self.np}: need at least one rank", "pass -np 1 or more")
        if self.mpi_args and (self.launcher is Backend.SRUN or self.gloo):
            raise UsageError("--mpi-arg is for mpirun (and horovodrun --mpi); "
                             + ("Gloo takes none" if self.gloo else "srun takes none"),
                             "drop --mpi-arg, or use --backend mpirun")
        check_srun_args(self.srun_args, None if self.backend in (None, Backend.SRUN)
                        else self.backend.value)  # the launcher is chosen later: prepare()
        if self.gloo and self.backend is not Backend.HOROVODRUN:
            raise UsageError("--gloo needs the horovodrun backend (mpirun always uses MPI)",
                             "add --backend horovodrun, or drop --gloo")

        if self.strategy is not Strategy.HOROVOD and (
                self.backend is Backend.HOROVODRUN or self.gloo):
            raise UsageError(
                f"--strategy {self.strategy.value} starts TensorFlow tasks, not Horovod ranks: "
                "horovodrun and Gloo do not apply",
                "drop --backend horovodrun, --gloo and --elastic (mpirun or srun start the "
                "tasks)",
            )
        if self.strategy is not Strategy.HOROVOD and self.horovod.asked:
            raise UsageError(
                f"{', '.join(self.horovod.asked)} tune Horovod; --strategy "
                f"{self.strategy.value} runs TensorFlow's own collectives, which do not read them",
                "drop these flags, or use --strategy horovod",
            )
        if self.strategy is Strategy.TF_PS and self.ps < 1:
            raise UsageError("--strategy tf-ps needs parameter-server tasks: --ps is missing",
                             "add --ps N (N >= 1): N ps tasks, spread over the hosts")
        if self.strategy is not Strategy.TF_PS and self.ps > 0:
            raise UsageError(
                f"--ps {self.ps} is for --strategy tf-ps; this launch is "
                f"--strategy {self.strategy.value}",
                "add --strategy tf-ps, or drop --ps",
            )
        if self.ps_hosts not in ("shared", "own"):
            raise UsageError(f"--ps-hosts {self.ps_hosts}: choose shared or own",
                             "pass --ps-hosts own to give parameter servers hosts of their own")
        if self.ps_hosts == "own" and self.strategy is not Strategy.TF_PS:
            raise UsageError("--ps-hosts own is for --strategy tf-ps",
                             "add --strategy tf-ps --ps N, or drop --ps-hosts")
        _check_elastic(self)
        if not 1024 <= self.tf_port <= 65000:
            raise UsageError(f"--tf-port {self.tf_port} is outside 1024-65000",
                             "pass a port such as 23456 that no service on the hosts uses")

    @property
    def launcher(self) -> Backend:
        """The backend that runs (mpirun when none was chosen and no scheduler picked one)."""
        return self.backend or Backend.MPIRUN

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict that ``from_json`` reads back into an equal spec."""
        return {"version": SPEC_VERSION, **_encode(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchSpec:
        if data.get("version") != SPEC_VERSION:
            raise UsageError(
                f"the recorded launch spec has version {data.get('version')!r}, this ringtrain "
                f"reads version {SPEC_VERSION}",
                "relaunch with the options written out instead of --from",
            )
        try:
            spec: LaunchSpec = _decode(cls, {k: v for k, v in data.items() if k != "version"})
        except (TypeError, ValueError, KeyError) as err:
            raise UsageError(
                f"the recorded launch spec cannot be read: {err}",
                "relaunch with the options written out instead of --from",
            ) from err
        return spec

def _check_elastic(spec: LaunchSpec) -> None:
    el = spec.elastic
    if el is not None and (spec.backend is not Backend.HOROVODRUN or not spec.gloo):
        raise UsageError("--elastic runs Horovod's elastic driver: horovodrun with Gloo",
                         "drop --backend (--elastic picks horovodrun --gloo itself)")
    np = spec.np or (el.min_np if el else 1)
    if el is not None and not el.min_np <= np <= (el.max_np or np):
        raise UsageError(f"--elastic needs --min-np <= -np <= --max-np; got {el.min_np} <= "
                         f"{spec.np or '-'} <= {el.max_np or '-'}", "pass -np between them")


# JSON round trip: dataclasses as dicts, enums as values, paths as strings; decoding walks the
# field types, so the JSON holds no type tags and a golden file stays readable.

_NESTED: dict[str, type] = {
    "checkpoint": Location,
    "ssh": SshSpec,
    "allocation": AllocationPolicy,
    "preflight": PreflightSpec,
    "supervision": SupervisionPolicy,
    "straggler": StragglerPolicy,
    "restart": RestartPolicy,
    "horovod": HorovodTuning,
    "elastic": ElasticPolicy,
}


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


def _decode(cls: type, data: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        raw = data[f.name]
        kwargs[f.name] = _decode_field(cls, f.name, raw)
    return cls(**kwargs)


def _text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise TypeError(f"{raw!r} is not text")
    return raw


_ENUMS: dict[str, type[enum.Enum]] = {"backend": Backend, "gpus": GpuRule, "entry": Entry,
                                       "strategy": Strategy, "action": StragglerAction}


def _decode_field(cls: type, name: str, raw: Any) -> Any:  # noqa: PLR0911 - one per type
    if raw is None:
        return None
    if name == "checkpoint" and isinstance(raw, dict) and "url" in raw:  # before Location
        return Location.parse(_text(raw["url"]))
    if name in _NESTED:
        return _decode(_NESTED[name], raw)
    if name == "env":
        return tuple(EnvSpec(**e) for e in raw)
    if name in _ENUMS:
        return _ENUMS[name](raw)
    if name in ("runs_dir", "working_dir", "config", "known_hosts"):
        return Path(raw)
    if name in ("slot_overrides", "doctor_actions"):  # (pattern, slots), (code, action)
        return tuple((str(p), int(n) if name == "slot_overrides" else str(n)) for p, n in raw)
    if isinstance(raw, list):
        return tuple(raw)
    return raw
