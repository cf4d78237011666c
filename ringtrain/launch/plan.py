"""make_plan: LaunchRequest + Allocation -> LaunchPlan, the exact thing that will run. Pure.

``ringtrain launch --dry-run`` prints ``LaunchPlan.describe()``; ``ringtrain launch`` hands the
very same object to ``run.start``. Everything that differs between machines (environment, uid,
the Python interpreter, the clock) is passed in, so the same inputs give the same plan.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringtrain.errors import UsageError
from ringtrain.hostfile import Allocation, render_openmpi_hostfile
from ringtrain.launch.backends import Command, LaunchContext, backend_for, forwarded_names
from ringtrain.launch.sshconf import needs_ssh_config, render_ssh_config
from ringtrain.request import Backend, LaunchRequest

_SECRET_RE = re.compile(
    r"(SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|_KEY$|_KEY_ID$|^AUTH)", re.IGNORECASE
)
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.search(name))


def redact_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, REDACTED if is_secret_name(k) else v) for k, v in env)


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    run_id: str
    run_dir: Path
    hostfile_path: Path
    hostfile_text: str
    command: Command
    forwarded: tuple[str, ...]
    working_dir: Path
    allocation: Allocation
    backend: Backend
    attempt: int = 1
    ssh_config_text: str = ""  # written to attempt_dir/ssh_config when the inventory needs it

    @property
    def attempt_dir(self) -> Path:
        """Where this attempt's hostfile, plan.json and per-rank logs go."""
        return self.run_dir / f"attempt-{self.attempt}"

    @property
    def display_argv(self) -> str:
        return shlex.join(self.command.argv)

    @property
    def by_hand_argv(self) -> str:
        """The command with ringtrain's environment in front (``env K=V ... mpirun ...``), so
        that run by hand from the working dir it does the same job. Secret values are left out:
        the describe() text names them, to be exported first."""
        env = [f"{k}={v}" for k, v in self.command.env if not is_secret_name(k)]
        return shlex.join(["env", *env, *self.command.argv]) if env else self.display_argv

    def describe(self) -> str:
        """Human-readable plan: hostfile, rank placement, env delta (secrets redacted), argv."""
        out = [f"run id:      {self.run_id}   attempt {self.attempt}"]
        out.append(f"run dir:     {self.run_dir}")
        out.append(f"working dir: {self.working_dir}")
        out.append(f"backend:     {self.backend.value}   ranks: {self.allocation.np}")
        out.append(f"hostfile ({self.hostfile_path}):")
        out += [f"    {line}" for line in self.hostfile_text.splitlines()]
        out.append("ranks:")
        by_host = self.allocation.ranks_by_host()
        for host in self.allocation.hosts:
            out.append(f"    {host.name}: ranks {_ranges(by_host[host.name])}")
        out.append("environment set by ringtrain (secrets redacted):")
        out += [
            f"    {k}={v if v == REDACTED else shlex.quote(v)}"
            for k, v in redact_env(self.command.env)
        ]
        out.append("environment forwarded to ranks by name: " + " ".join(self.forwarded))
        secret = [k for k, _ in self.command.env if is_secret_name(k)]
        out.append("command (runs by hand from the working dir"
                   + (f", with {' '.join(secret)} exported" if secret else "") + "):")
        out.append(f"    {self.by_hand_argv}")
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "run_dir": str(self.run_dir),
            "backend": self.backend.value,
            "np": self.allocation.np,
            "hosts": [{"name": h.name, "slots": h.slots} for h in self.allocation.hosts],
            "hostfile": self.hostfile_text,
            "argv": list(self.command.argv),
            "env": dict(redact_env(self.command.env)),
            "forwarded": list(self.forwarded),
            "working_dir": str(self.working_dir),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def _ranges(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The machine-dependent facts make_plan needs, gathered once at the edge."""

    run_id: str
    environ: Mapping[str, str]
    is_root: bool
    python: str
    tcp_include: str | None = None
    attempt: int = 1
    extra_env: tuple[tuple[str, str], ...] = ()
    control_addr: str | None = None
    control_token: str | None = None
    launcher_timeout: float | None = None


def make_plan(request: LaunchRequest, alloc: Allocation, inputs: PlanInputs) -> LaunchPlan:
    run_dir = (request.runs_dir / inputs.run_id).absolute()
    script = _script_path(request)
    delta = _env_delta(request, inputs, run_dir)
    extra = [e.name for e in request.env]
    forward = forwarded_names(inputs.environ, delta, extra)
    missing = [e.name for e in request.env if e.value is None and e.name not in inputs.environ]
    if missing:
        raise UsageError(
            f"--env {missing[0]}: the variable is not set in this shell, so there is nothing "
            "to forward",
            f"set it first (export {missing[0]}=...) or pass --env {missing[0]}=VALUE",
        )
    ctx = LaunchContext(
        python=request.python or inputs.python,
        script=script,
        script_args=request.script_args,
        hostfile=run_dir / f"attempt-{inputs.attempt}" / "hostfile",
        env_delta=tuple(sorted(delta.items())),
        forward=forward,
        is_root=inputs.is_root,
        ssh_config=_ssh_config_path(request, alloc, run_dir / f"attempt-{inputs.attempt}"),
        tcp_include=request.network_interface or inputs.tcp_include,
        network_interface=request.network_interface,
        gloo=request.gloo,
        user_btl="OMPI_MCA_btl" in inputs.environ,
    )
    command = backend_for(request.backend).build(alloc, ctx)
    ssh_text = ""
    if _own_ssh_config(request, alloc):
        ssh_text = render_ssh_config(alloc.hosts, request.ssh_config, request.known_hosts)
    return LaunchPlan(
        ssh_config_text=ssh_text,
        run_id=inputs.run_id,
        run_dir=run_dir,
        hostfile_path=ctx.hostfile,
        hostfile_text=render_openmpi_hostfile(alloc.hosts),
        command=command,
        forwarded=forward,
        working_dir=request.working_dir.absolute(),
        allocation=alloc,
        backend=request.backend,
        attempt=inputs.attempt,
    )


def _own_ssh_config(request: LaunchRequest, alloc: Allocation) -> bool:
    if alloc.is_local_only:
        return False
    return needs_ssh_config(alloc.hosts) or request.known_hosts is not None


def _ssh_config_path(request: LaunchRequest, alloc: Allocation, attempt_dir: Path) -> Path | None:
    """The ssh_config mpirun's ssh uses: ours when the inventory carries SSH coordinates or
    --known-hosts names the file host keys are checked against."""
    if _own_ssh_config(request, alloc):
        return attempt_dir / "ssh_config"
    return request.ssh_config.absolute() if request.ssh_config else None


def _script_path(request: LaunchRequest) -> str:
    path = Path(request.script)
    if not path.is_absolute():
        path = (request.working_dir / path).absolute()
    return str(path)


def _env_delta(request: LaunchRequest, inputs: PlanInputs, run_dir: Path) -> dict[str, str]:
    delta = {
        "RINGTRAIN_RUN_DIR": str(run_dir),
        "RINGTRAIN_RUN_ID": inputs.run_id,
        "RINGTRAIN_ATTEMPT": str(inputs.attempt),
    }
    if inputs.control_addr and inputs.control_token:
        delta["RINGTRAIN_CONTROL_ADDR"] = inputs.control_addr
        delta["RINGTRAIN_CONTROL_TOKEN"] = inputs.control_token
        if inputs.launcher_timeout is not None:
            delta["RINGTRAIN_LAUNCHER_TIMEOUT"] = f"{inputs.launcher_timeout:g}"
    if "TF_CPP_MIN_LOG_LEVEL" not in inputs.environ:
        delta["TF_CPP_MIN_LOG_LEVEL"] = "1"
    for name, value in inputs.extra_env:
        delta.setdefault(name, value)
    if request.checkpoint_url is not None:
        delta["RINGTRAIN_CHECKPOINT_URL"] = request.checkpoint_url
    for spec in request.env:
        if spec.value is not None:
            delta[spec.name] = spec.value
    return delta
