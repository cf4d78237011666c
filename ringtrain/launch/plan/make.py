"""make_plan: LaunchSpec + Allocation -> LaunchPlan, the exact thing that will run. Pure.

``ringtrain launch --dry-run`` prints ``LaunchPlan.describe()``; ``ringtrain launch`` hands the
very same object to ``run.start``. Everything that differs between machines (environment, uid,
the Python interpreter, the clock) is passed in, so the same inputs give the same plan.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringtrain.errors import UsageError
from ringtrain.hostfile import Allocation, render_openmpi_hostfile
from ringtrain.launch.plan import tfcluster
from ringtrain.launch.plan.launchers import (
    OMPI_TREE_RADIX,
    Command,
    LaunchContext,
    backend_for,
    forwarded_names,
    mca_notes,
    ssh_shim,
    withheld_names,
)
from ringtrain.launch.plan.mca import UserMca
from ringtrain.launch.plan.secretvars import REDACTED, Secrecy, by_file
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.rank import envvars, secretfile
from ringtrain.remote.sshconf import render_ssh_config
from ringtrain.slurm_options import srun_mpi
from ringtrain.spec import Backend, Entry, LaunchSpec, Strategy

PLAN_SCHEMA = 1  # plan.json's layout; the recorded spec has its own version


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
    spec: LaunchSpec
    attempt: int = 1
    ssh_config_text: str = ""  # written to attempt_dir/ssh_config when the inventory needs it
    ssh_shim_text: str = ""  # horovodrun's ssh, written to attempt_dir/bin/ssh (ssh_shim)
    elastic_hosts_text: str = ""  # --elastic: host:slots lines its discovery script prints
    # the run directory as this machine's child processes reach it (RunDir.reach, through the
    # launcher's descriptor), and the command naming its files so; None: by its path (a dry
    # run). ``command`` is what is shown and recorded; ``started`` is what runs.
    reach: Path | None = None
    reached_command: Command | None = None
    # MCA parameters set outside ringtrain (--mpi-arg, OMPI_MCA_*): which of the launcher's
    # own gave way (launch/plan/mca.py), one line each
    mca_notes: tuple[str, ...] = ()

    @property
    def attempt_dir(self) -> Path:
        """Where this attempt's hostfile, plan.json and per-rank logs go."""
        return self.run_dir / f"attempt-{self.attempt}"

    @property
    def attempt_name(self) -> str:
        """``attempt_dir`` inside the run directory (a RunDir's name for it)."""
        return f"attempt-{self.attempt}"

    @property
    def reached_attempt_dir(self) -> Path:
        """``attempt_dir`` as the launcher's child processes name it."""
        return (self.reach or self.run_dir) / self.attempt_name

    @property
    def started(self) -> Command:
        """The command ``run.start`` starts: ``command`` with the run directory's files named
        through the launcher's descriptor."""
        return self.reached_command or self.command

    @property
    def display_argv(self) -> str:
        return shlex.join(self.command.argv)

    @property
    def by_hand_argv(self) -> str:
        """The command with ringtrain's environment in front (``env K=V ... mpirun ...``), so
        that run by hand from the working dir it does the same job. Secret values are left out:
        the describe() text names them, to be exported first. (Without the secrets file, which
        exists only while ringtrain runs the job: mpirun forwards the secrets by name again.)"""
        env = [f"{k}={v}" for k, v in self.command.env
               if not self.secrecy.is_secret(k, v) and k != envvars.ENV_FILE]
        argv = list(self.command.argv)
        if self.backend is Backend.MPIRUN and self.command.secrets:
            at = next(i for i in range(len(argv) - 1) if argv[i:i + 2] == ["-x", envvars.ENV_FILE])
            argv[at:at + 2] = [a for k, _ in self.command.secrets for a in ("-x", k)]
        unset = [a for name in self.command.withheld for a in ("-u", name)]
        return shlex.join(["env", *unset, *env, *argv] if env or unset else argv)

    @property
    def secrecy(self) -> Secrecy:
        """What the user said is secret or plain (``--env``, ``--env-plain``)."""
        return Secrecy.of(self.spec.env)

    @property
    def secret_names(self) -> tuple[str, ...]:
        """The secrets a by-hand run needs exported: in the delta, or sent by file."""
        names = [k for k, v in self.command.env if self.secrecy.is_secret(k, v)]
        return tuple(dict.fromkeys([*names, *(k for k, _ in self.command.secrets)]))

    def describe(self) -> str:
        """Human-readable plan: hostfile, rank placement, env delta (secrets redacted), argv."""
        out = [f"run id:      {self.run_id}   attempt {self.attempt}"]
        out.append(f"run dir:     {self.run_dir}")
        out.append(f"working dir: {self.working_dir}")
        out.append(f"backend:     {self.backend.value}   ranks: {self.allocation.np}"
                   f"   strategy: {self.spec.strategy.value}")
        out.append(f"hostfile ({self.hostfile_path}):")
        out += [f"    {line}" for line in self.hostfile_text.splitlines()]
        out.append("ranks:")
        by_host = self.allocation.ranks_by_host()
        for host in self.allocation.hosts:
            out.append(f"    {host.name}: ranks {_ranges(by_host[host.name])}")
        cluster = dict(self.command.env).get(envvars.TF_CLUSTER)
        if cluster is not None:
            out.append("TensorFlow tasks (each rank's TF_CONFIG, set by the rank entry):")
            out += tfcluster.describe(json.loads(cluster))
        out.append("environment set by ringtrain (secrets redacted):")
        out += [
            f"    {k}={v if v == REDACTED else shlex.quote(v)}"
            for k, v in self.secrecy.redact_env(self.command.env)
        ]
        out.append("environment forwarded to ranks by name: " + " ".join(self.forwarded))
        if self.command.withheld:
            out.append("kept from the ranks (set in this shell; --env NAME sends one): "
                       + " ".join(self.command.withheld))
        out += self.mca_notes
        if self.command.secrets:
            where = dict(self.command.env)[envvars.ENV_FILE]
            out.append(f"secrets to the ranks by file ({where}, 0600 on every host while the "
                       f"job runs; not through {self.backend.value}: {_EXPOSES[self.backend]}): "
                       + " ".join(k for k, _ in self.command.secrets))
        secret = self.secret_names
        risk = f"; run so, {_EXPOSES[self.backend]}" if self.command.secrets else ""
        out.append("command (runs by hand from the working dir"
                   + (f", with {' '.join(secret)} exported{risk}" if secret else "") + "):")
        out.append(f"    {self.by_hand_argv}")
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        data = self._json()
        if self.command.secrets:  # by file: names only, as everywhere in plan.json
            data["secrets_by_file"] = [k for k, _ in self.command.secrets]
        if self.command.withheld:
            data["withheld"] = list(self.command.withheld)
        return data

    def _json(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "run_dir": str(self.run_dir),
            "backend": self.backend.value,
            "np": self.allocation.np,
            "hosts": [{"name": h.name, "slots": h.slots} for h in self.allocation.hosts],
            "hostfile": self.hostfile_text,
            "argv": list(self.command.argv),
            "env": dict(self.secrecy.redact_env(self.command.env)),
            "forwarded": list(self.forwarded),
            "working_dir": str(self.working_dir),
            "spec": recorded_spec(self.spec),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2)


_EXPOSES = {Backend.MPIRUN: "mpirun sends their values to every host in clear",
            Backend.HOROVODRUN: "horovodrun shows their values in ps or sends them in clear",
            Backend.SRUN: "srun sends their values to every node's slurmd in clear"}


def recorded_spec(spec: LaunchSpec) -> dict[str, Any]:
    """The spec as plan.json records it: ``--env NAME=VALUE`` keeps only its name (its value
    is a secret unless ``--env-plain`` said otherwise), so ``launch --from`` forwards that
    variable from the launcher's environment."""
    data = spec.to_json()
    secrecy = Secrecy.of(spec.env)
    data["env"] = [
        {"name": e.name, "value": None if secrecy.is_secret(e.name, e.value) else e.value,
         "plain": e.plain}
        for e in spec.env
    ]
    return data


def read_recorded_spec(data: Mapping[str, Any]) -> LaunchSpec:
    """The LaunchSpec a plan.json recorded (``launch --from``)."""
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise UsageError(
            "this plan.json records no launch spec (written by an older ringtrain)",
            "relaunch with the options written out",
        )
    return LaunchSpec.from_json(spec)


def _ranges(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What make_plan needs beyond the spec and the allocation: the launcher machine's facts
    (``env``, gathered once at the edge) and this attempt's."""

    env: SessionEnv
    tcp_include: str | None = None
    attempt: int = 1
    extra_env: tuple[tuple[str, str], ...] = ()
    control_addr: str | None = None
    control_token: str | None = None
    launcher_timeout: float | None = None
    reach: Path | None = None  # the run directory through the launcher's descriptor (RunDir)
    # --elastic: every host the pre-flight passed, with its usable slots (the discovery
    # script's list: Horovod may grow onto them up to --max-np); empty: the allocation's
    elastic_hosts: tuple[tuple[str, int], ...] = ()

    @property
    def run_id(self) -> str:
        return self.env.run_id

    @property
    def environ(self) -> Mapping[str, str]:
        return self.env.environ


def make_plan(spec: LaunchSpec, alloc: Allocation, inputs: PlanInputs) -> LaunchPlan:
    run_dir = (spec.runs_dir / inputs.run_id).absolute()
    script = _script_path(spec)
    delta = _env_delta(spec, inputs, run_dir, alloc.np)
    if spec.strategy is not Strategy.HOROVOD:
        delta[envvars.TF_CLUSTER] = tfcluster.encode(tfcluster.cluster_for(alloc, spec))
    extra = [e.name for e in spec.env]
    # the AWS keys only where a rank needs them (a checkpoint on S3; or --env names them)
    withheld = withheld_names(inputs.environ, delta, extra, aws_keys=_on_s3(spec))
    forward = tuple(n for n in forwarded_names(inputs.environ, delta, extra)
                    if n not in withheld)
    missing = [e.name for e in spec.env if e.value is None and e.name not in inputs.environ]
    if missing:
        raise UsageError(
            f"--env {missing[0]}: the variable is not set in this shell, so there is nothing "
            "to forward",
            f"set it first (export {missing[0]}=...) or pass --env {missing[0]}=VALUE",
        )
    # the secrets that would cross the network or reach a command line go by file instead
    hidden = by_file(spec.launcher, inputs.environ, delta, forward, Secrecy.of(spec.env),
                     withheld)
    if hidden and spec.launcher is not Backend.HOROVODRUN:  # the file's name, never theirs
        names = {k for k, _ in hidden}
        forward = (*(n for n in forward if n not in names), envvars.ENV_FILE)
    attempt = f"attempt-{inputs.attempt}"
    ctx = LaunchContext(
        python=spec.python or inputs.env.python,
        script=script,
        script_args=spec.script_args,
        hostfile=run_dir / attempt / "hostfile",
        env_delta=tuple(sorted(delta.items())),
        forward=forward,
        is_root=inputs.env.is_root,
        ssh_config=_ssh_config_path(spec, alloc, run_dir / attempt),
        launcher_path=inputs.environ.get("PATH", "/usr/bin:/bin"),
        elastic=spec.elastic,
        tcp_include=spec.network_interface or inputs.tcp_include,
        network_interface=spec.network_interface,
        gloo=spec.gloo,
        user_mca=UserMca.read(spec.mpi_args, inputs.environ),
        entry=spec.entry,
        mpi_args=spec.mpi_args,
        srun_args=spec.srun_args,
        srun_mpi=srun_mpi(spec.srun_args, inputs.environ)
        if spec.launcher is Backend.SRUN else None,
        secrets=hidden,
        secrets_file=secretfile.path_for(inputs.run_id, inputs.attempt),
    )
    backend = backend_for(spec.launcher)
    command = replace(backend.build(alloc, ctx), withheld=withheld)
    near = ctx  # the same, its files named as the launcher's children reach them
    if inputs.reach is not None:
        # past Open MPI's tree radix its daemons run the ssh on the hosts: there only the
        # run directory's own path can name the config (a directory the hosts share)
        reached = len(alloc.hosts) <= OMPI_TREE_RADIX
        near = replace(ctx, hostfile=inputs.reach / attempt / "hostfile",
                       ssh_config=_ssh_config_path(spec, alloc, inputs.reach / attempt)
                       if reached else ctx.ssh_config)
    ssh_text = shim = ""
    if _own_ssh_config(spec, alloc):
        ssh_text = render_ssh_config(alloc.hosts, spec.ssh.config, spec.ssh.known_hosts)
    if near.ssh_config is not None and spec.launcher is Backend.HOROVODRUN:
        shim = ssh_shim(inputs.env.ssh, near.ssh_config)
    return LaunchPlan(
        mca_notes=mca_notes(spec.launcher, alloc, ctx),
        reach=inputs.reach,
        reached_command=replace(backend.build(alloc, near), withheld=withheld)
        if inputs.reach is not None else None,
        ssh_config_text=ssh_text,
        ssh_shim_text=shim,
        elastic_hosts_text="".join(f"{name}:{slots}\n" for name, slots in (
            inputs.elastic_hosts or tuple((h.name, h.slots) for h in alloc.hosts)))
        if spec.elastic is not None else "",
        run_id=inputs.run_id,
        run_dir=run_dir,
        hostfile_path=ctx.hostfile,
        hostfile_text=render_openmpi_hostfile(alloc.hosts),
        command=command,
        forwarded=forward,
        working_dir=spec.working_dir.absolute(),
        allocation=alloc,
        backend=spec.launcher,
        spec=spec,
        attempt=inputs.attempt,
    )


def _on_s3(spec: LaunchSpec) -> bool:
    return spec.checkpoint is not None and spec.checkpoint.protocol == "s3"


def _own_ssh_config(spec: LaunchSpec, alloc: Allocation) -> bool:
    """ringtrain writes the ssh_config of every launch whose launcher reaches remote hosts by
    ssh (mpirun, horovodrun: not srun): host keys checked as strictly as the probe did."""
    return not alloc.is_local_only and spec.launcher is not Backend.SRUN


def _ssh_config_path(spec: LaunchSpec, alloc: Allocation, attempt_dir: Path) -> Path | None:
    """The ssh_config mpirun's (and horovodrun's) ssh uses: ours (_own_ssh_config)."""
    if _own_ssh_config(spec, alloc):
        return attempt_dir / "ssh_config"
    return spec.ssh.config.absolute() if spec.ssh.config else None


def _script_path(spec: LaunchSpec) -> str:
    """A script or program's absolute path (the ranks may start elsewhere); a module's name,
    and a program found on PATH by its bare name, stay as they are."""
    if spec.entry is Entry.MODULE or (spec.entry is Entry.EXECUTABLE and "/" not in spec.script):
        return spec.script
    path = Path(spec.script)
    if not path.is_absolute():
        path = (spec.working_dir / path).absolute()
    return str(path)


HUBS_FROM = 2048  # --control-hubs auto: from this many ranks (docs/SCALE.md)


def hubs_for(asked: bool | None, ranks: int) -> bool:
    """Whether a job of ``ranks`` supervises through per-host hubs (rank/hub.py): as asked,
    or (auto) from ``HUBS_FROM`` ranks."""
    return ranks >= HUBS_FROM if asked is None else asked


def _env_delta(spec: LaunchSpec, inputs: PlanInputs, run_dir: Path,
               ranks: int) -> dict[str, str]:
    delta = {
        envvars.RUN_DIR: str(run_dir),
        envvars.RUN_ID: inputs.run_id,
        envvars.ATTEMPT: str(inputs.attempt),
    }
    if inputs.control_addr and inputs.control_token:
        delta[envvars.CONTROL_ADDR] = inputs.control_addr
        delta[envvars.CONTROL_TOKEN] = inputs.control_token
        most = max(ranks, spec.elastic.max_np or 0) if spec.elastic is not None else ranks
        if hubs_for(spec.supervision.control_hubs, most):
            delta[envvars.CONTROL_HUB] = "1"
        if inputs.launcher_timeout is not None:
            delta[envvars.LAUNCHER_TIMEOUT] = f"{inputs.launcher_timeout:g}"
    if "TF_CPP_MIN_LOG_LEVEL" not in inputs.environ:
        delta["TF_CPP_MIN_LOG_LEVEL"] = "1"
    for name, value in inputs.extra_env:
        delta.setdefault(name, value)
    if spec.elastic is not None and spec.elastic.warm_spares:
        delta[envvars.WARM] = inputs.run_id  # a rank may start in a warm process (warmspares)
    if spec.checkpoint is not None:
        delta[envvars.CHECKPOINT_URL] = spec.checkpoint.text
    delta[envvars.CHECKPOINT_GRACE] = f"{spec.checkpoint_grace:g}"
    delta.update(spec.horovod.env())  # horovodrun's tuning flags, as horovodrun sets them
    for env in spec.env:
        if env.value is not None:
            delta[env.name] = env.value
    return delta
