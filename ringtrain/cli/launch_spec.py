"""``build_spec``: the options of ``ringtrain launch`` -> one LaunchSpec. Pure.

The only place that turns command-line values into the spec; ``launch_cmd`` passes click's
values through unchanged and a golden test pins the result (tests/unit/golden/spec/).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ringtrain.hostfile import AllocationPolicy
from ringtrain.spec import (
    Backend,
    CheckpointLocation,
    EnvSpec,
    GpuRule,
    LaunchSpec,
    PreflightSpec,
    RestartPolicy,
    SshSpec,
    SupervisionPolicy,
)


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """click's values for ``ringtrain launch``, as they arrive (defaults are click's)."""

    script: str
    script_args: tuple[str, ...] = ()
    hosts_file: str | None = None
    host_spec: str | None = None
    hosts_format: str | None = None
    np: int | None = None
    backend: str | None = None
    gloo: bool = False
    env: tuple[EnvSpec, ...] = ()
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    no_probe: bool = False
    gpu_mode: str | None = None
    on_bad_host: str = "fail"
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
    max_restarts: int = 0
    min_np: int | None = None
    start_timeout: float = 120.0
    stall_timeout: float | None = None
    heartbeat_timeout: float = 10.0
    exit_grace: float = 120.0


def build_spec(opts: LaunchOptions, working_dir: Path) -> LaunchSpec:
    """The LaunchSpec the options ask for; ``working_dir`` is where the launch was typed."""
    on_bad: Literal["fail", "exclude"] = "exclude" if opts.on_bad_host == "exclude" else "fail"
    return LaunchSpec(
        script=opts.script,
        script_args=opts.script_args,
        hosts_file=opts.hosts_file,
        host_spec=opts.host_spec,
        hosts_format=opts.hosts_format,
        np=opts.np,
        backend=Backend(opts.backend) if opts.backend else None,
        gloo=opts.gloo,
        env=opts.env,
        runs_dir=opts.runs_dir,
        working_dir=working_dir,
        python=opts.python,
        network_interface=opts.network_interface,
        checkpoint=(
            CheckpointLocation.parse(opts.checkpoint_url, working_dir)
            if opts.checkpoint_url is not None
            else None
        ),
        checkpoint_grace=opts.checkpoint_grace,
        ssh=SshSpec(opts.ssh_config, opts.known_hosts, opts.accept_new_host_keys),
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
            on_bad_host=on_bad,
            require_same_versions=not opts.allow_mixed_versions,
        ),
        supervision=SupervisionPolicy(
            start_timeout=opts.start_timeout,
            stall_timeout=opts.stall_timeout,
            heartbeat_timeout=opts.heartbeat_timeout,
            exit_grace=opts.exit_grace,
        ),
        restart=RestartPolicy(max_restarts=opts.max_restarts, min_np=opts.min_np),
    )
