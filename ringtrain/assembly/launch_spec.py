"""``build_spec``: the options of ``ringtrain launch`` -> one LaunchSpec. Pure.

The only place that turns launch options into the spec: ``ringtrain launch`` passes click's
values through unchanged, ``ringtrain.run()`` maps its keyword arguments onto the same
fields, and a golden test pins the result (tests/unit/golden/spec/).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import get_args

from ringtrain.checkpoint.location import Location
from ringtrain.errors import CheckpointError, UsageError
from ringtrain.hostfile import AllocationPolicy
from ringtrain.hvd_tuning import HorovodTuning
from ringtrain.probe.doctor_policy import parse_on_bad_host
from ringtrain.ringcheck.outliers import parse_link_rate
from ringtrain.spec import (
    Backend,
    ElasticPolicy,
    Entry,
    EnvSpec,
    GpuRule,
    LaunchSpec,
    PreflightSpec,
    RestartPolicy,
    SshSpec,
    SshTransport,
    StragglerAction,
    StragglerPolicy,
    Strategy,
    SupervisionPolicy,
)


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """click's values for ``ringtrain launch``, as they arrive (defaults are click's)."""

    script: str | None
    script_args: tuple[str, ...] = ()
    module: str | None = None
    mpi_args: tuple[str, ...] = ()
    srun_args: tuple[str, ...] = ()  # --srun-args, split into words
    hosts_file: str | None = None
    host_spec: str | None = None
    hosts_format: str | None = None
    np: int | None = None
    backend: str | None = None
    gloo: bool = False
    strategy: str = "horovod"
    tf_port: int = 23456
    ps: int = 0
    ps_hosts: str = "shared"
    env: tuple[EnvSpec, ...] = ()
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_transport: str = "paramiko"
    no_probe: bool = False
    ring_check: bool = False
    expect_link: str | None = None
    slow_ratio: float = 0.5
    on_slow_host: str = "warn"
    gpu_mode: str | None = None
    on_bad_host: str | tuple[str, ...] = "fail"  # fail|exclude, and CODE=ACTION per code
    min_hosts: int = 1
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    slots: tuple[tuple[str, int], ...] = ()
    ring_label: str | None = None
    allow_mixed_versions: bool = False
    network_interface: str | None = None
    python: str | None = None
    checkpoint_url: str | None = None
    checkpoint_grace: float = 60.0
    runs_dir: Path = Path("runs")
    trust_groups: tuple[str, ...] = ()
    max_restarts: int = 0
    min_np: int | None = None
    stall_restarts: int = 3
    recheck_timeout: float = 15.0
    start_timeout: float = 120.0
    stall_timeout: float | None = None
    heartbeat_timeout: float = 10.0
    control_hubs: str | bool = "auto"  # auto, on, off (the API: a bool too)
    exit_grace: float = 120.0
    on_straggler: str | None = None
    straggler_threshold: float = 1.5
    straggler_window: float = 60.0
    # horovodrun's tuning flags (ringtrain/hvd_tuning.py)
    fusion_threshold_mb: int | None = None
    cycle_time_ms: float | None = None
    cache_capacity: int | None = None
    hierarchical_allreduce: bool | None = None
    hierarchical_allgather: bool | None = None
    autotune: bool = False
    autotune_log_file: str | None = None
    timeline_filename: str | None = None
    timeline_mark_cycles: bool = False
    hvd_log_level: str | None = None
    gloo_timeout_seconds: int | None = None
    output_filename: str | None = None
    # --elastic: Horovod's elastic driver (--min-np is the floor there too)
    elastic: bool = False
    max_np: int | None = None
    elastic_timeout: int = 600
    blacklist_cooldown_range: tuple[int, int] = (60, 240)
    spares: int = 0
    warm_spares: bool = True


def build_spec(opts: LaunchOptions, working_dir: Path) -> LaunchSpec:
    """The LaunchSpec the options ask for; ``working_dir`` is where the launch was typed."""
    bad = parse_on_bad_host((opts.on_bad_host,) if isinstance(opts.on_bad_host, str)
                            else opts.on_bad_host)
    if opts.max_np is not None and not opts.elastic:
        raise UsageError(f"--max-np {opts.max_np} is for --elastic (a job that grows)",
                         "add --elastic, or drop --max-np")
    if opts.spares and not opts.elastic:
        raise UsageError(f"--spares {opts.spares} is for --elastic (a spare takes a lost "
                         "host's place while the others go on)", "add --elastic, or drop --spares")
    entry, script, script_args, python = _entry(opts)
    return LaunchSpec(
        script=script,
        script_args=script_args,
        entry=entry,
        mpi_args=opts.mpi_args,
        srun_args=opts.srun_args,
        hosts_file=opts.hosts_file,
        host_spec=opts.host_spec,
        hosts_format=opts.hosts_format,
        np=opts.np,
        backend=(Backend(opts.backend) if opts.backend
                 else Backend.HOROVODRUN if opts.elastic else None),
        gloo=opts.gloo or (opts.elastic and opts.backend in (None, Backend.HOROVODRUN.value)),
        strategy=Strategy(opts.strategy),
        tf_port=opts.tf_port,
        ps=opts.ps,
        ps_hosts=opts.ps_hosts,
        env=opts.env,
        runs_dir=opts.runs_dir,
        trust_groups=opts.trust_groups,
        working_dir=working_dir,
        python=python,
        network_interface=opts.network_interface,
        checkpoint=_checkpoint(opts.checkpoint_url, working_dir),
        checkpoint_grace=opts.checkpoint_grace,
        ssh=SshSpec(
            opts.ssh_config,
            opts.known_hosts,
            opts.accept_new_host_keys,
            opts.ssh_port,
            opts.ssh_identity_file,
            ssh_transport(opts.ssh_transport),
        ),
        allocation=AllocationPolicy(
            include=opts.include,
            exclude=opts.exclude,
            slot_overrides=opts.slots,
            min_hosts=opts.min_hosts,
            ring_label=opts.ring_label,
        ),
        preflight=PreflightSpec(
            enabled=not opts.no_probe,
            gpus=GpuRule(opts.gpu_mode or GpuRule.AUTO.value),
            on_bad_host=bad.general,
            doctor_actions=bad.per_code,
            require_same_versions=not opts.allow_mixed_versions,
            ring_check=opts.ring_check,
            expect_link_Bps=(parse_link_rate(opts.expect_link)
                             if opts.expect_link is not None else None),
            slow_ratio=opts.slow_ratio,
            on_slow_host="exclude" if opts.on_slow_host == "exclude" else "warn",
        ),
        supervision=SupervisionPolicy(
            start_timeout=opts.start_timeout,
            stall_timeout=opts.stall_timeout,
            heartbeat_timeout=opts.heartbeat_timeout,
            control_hubs=control_hubs(opts.control_hubs),
            exit_grace=opts.exit_grace,
            straggler=_straggler_policy(opts),
        ),
        restart=RestartPolicy(max_restarts=opts.max_restarts, min_np=opts.min_np,
                              stall_restarts=opts.stall_restarts,
                              recheck_timeout_s=opts.recheck_timeout),
        horovod=_tuning(opts),
        elastic=ElasticPolicy(min_np=opts.min_np or 1, max_np=opts.max_np,
                              cooldown_range=opts.blacklist_cooldown_range,
                              timeout_s=opts.elastic_timeout,
                              spares=opts.spares, warm_spares=opts.warm_spares)
        if opts.elastic else None,
    )


SSH_TRANSPORTS: tuple[SshTransport, ...] = get_args(SshTransport)


def ssh_transport(text: str) -> SshTransport:
    """``--ssh-transport`` (or ``ssh_transport=``, or a recorded spec's) checked."""
    for name in SSH_TRANSPORTS:
        if text == name:
            return name
    raise UsageError(f"SSH transport {text!r}: choose {' or '.join(SSH_TRANSPORTS)}",
                     "pass --ssh-transport openssh to reach hosts with OpenSSH's own ssh "
                     "(hostbased, GSSAPI, @cert-authority), or paramiko (the default)")


def control_hubs(value: str | bool) -> bool | None:
    """``--control-hubs`` (``control_hubs=`` may also be a bool): True, False, None (auto)."""
    choice = {"on": True, "off": False, "auto": None, True: True, False: False}
    if isinstance(value, str | bool) and value in choice:
        return choice[value]
    raise UsageError(f"control hubs {value!r}: choose auto, on or off",
                     "on: each host's ranks reach the launcher through one process on that "
                     "host; off: one connection a rank; auto (the default): on from 2,048 ranks")


def _tuning(opts: LaunchOptions) -> HorovodTuning:
    """horovodrun's tuning flags, by name (``--log-level`` is ``hvd_log_level`` here: ringtrain
    keeps -v/-q for its own)."""
    names = {f.name: "hvd_log_level" if f.name == "log_level" else f.name
             for f in dataclasses.fields(HorovodTuning)}
    return HorovodTuning(**{ours: getattr(opts, theirs) for ours, theirs in names.items()})


def _checkpoint(text: str | None, working_dir: Path) -> Location | None:
    """--checkpoint parsed once, by the one parser (checkpoint/location.py)."""
    if text is None:
        return None
    try:
        return Location.parse(text, working_dir)
    except CheckpointError as err:
        raise UsageError(f"--checkpoint: {err.message}", err.hint) from None


def _straggler_policy(opts: LaunchOptions) -> StragglerPolicy:
    action = StragglerAction(opts.on_straggler or StragglerAction.WARN.value)
    if action is StragglerAction.RESTART_WITHOUT and opts.max_restarts < 1:
        raise UsageError(
            "--on-straggler restart-without restarts the job, but --max-restarts is 0",
            "add --max-restarts 1 (and --min-np N if the job may shrink without the host)",
        )
    return StragglerPolicy(
        action=action,
        threshold=opts.straggler_threshold,
        window_s=opts.straggler_window,
        asked=opts.on_straggler is not None,
    )


_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")
_HARMLESS_PYTHON_FLAGS = ("-u", "-B")  # unbuffered, no .pyc: the rank entry already does both


def _entry(opts: LaunchOptions) -> tuple[Entry, str, tuple[str, ...], str | None]:
    """(what runs, its name, its arguments, --python): ``train.py ARGS``, ``-m pkg.train
    ARGS``, and the way horovodrun users write the command, ``python train.py ARGS`` or
    ``python -m pkg.train ARGS`` (a path to the interpreter becomes --python). Whether a
    non-.py SCRIPT is a program is for the caller to tell (it needs the file system)."""
    args = ((opts.script,) if opts.script is not None else ()) + opts.script_args
    if opts.module is not None:
        return Entry.MODULE, opts.module, args, opts.python
    if not args:
        raise UsageError(
            "no training script given",
            "ringtrain launch [OPTIONS] SCRIPT [ARGS], -m MODULE [ARGS], or --from RUN_DIR",
        )
    first, rest = args[0], args[1:]
    if not _PYTHON_RE.match(PurePosixPath(first).name):
        return Entry.SCRIPT, first, rest, opts.python
    python = opts.python
    if python is None and "/" in first:
        python = first  # horovodrun runs the interpreter it is given; so do the ranks
    while rest and rest[0] in _HARMLESS_PYTHON_FLAGS:
        rest = rest[1:]
    if rest[:1] == ("-m",) and len(rest) >= 2:
        return Entry.MODULE, rest[1], rest[2:], python
    if not rest or rest[0].startswith("-"):
        raise UsageError(
            f"{' '.join(args[:3])}: ringtrain runs a script or a module on every rank, not "
            "an interpreter with these options",
            "write `ringtrain launch train.py ARGS` or `ringtrain launch -m pkg.train ARGS` "
            "(`python train.py` and `python -m pkg.train` work too)",
        )
    return Entry.SCRIPT, rest[0], rest[1:], python
