"""Launcher backends: one class per way of starting ranks. Each turns an Allocation into a Command.

Pure: no process is started here. A Command is an argv tuple plus the environment *delta* to set
on top of the launcher's own environment. Variables reach the ranks by name (``-x NAME``), never
as ``NAME=VALUE`` in argv, so values stay out of ``ps`` output and logs. Secrets go further:
Open MPI ships the value of every ``-x`` name to each host's daemon in its launch message, in
clear, and horovodrun forwards its whole environment (over Gloo it writes every value into each
rank's ``sh -c`` / ``ssh`` command line), and srun ships its whole environment to every node's
slurmd. So under every backend the secrets leave the command's environment (``Command.unset``)
and travel by a file only the user can read (``Command.secrets``, launch/plan/secretvars.py,
``ringtrain.rank.secretfile``); under mpirun and srun its name, ``RINGTRAIN_ENV_FILE``, is
forwarded instead of theirs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ringtrain.errors import UsageError
from ringtrain.hostfile import Allocation, render_horovod_hosts
from ringtrain.launch.plan import mca
from ringtrain.rank import envvars, isolated
from ringtrain.slurm_options import DEFAULT_MPI
from ringtrain.spec import Backend, ElasticPolicy, Entry

# Variables forwarded to every rank when the launcher has them. Prefixes forward whole families.
FORWARD_NAMES = (
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "TF_CPP_MIN_LOG_LEVEL",
    "OMP_NUM_THREADS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
FORWARD_PREFIXES = (
    "HOROVOD_",
    "NCCL_",
    "TF_CPP_",
    "TF_ENABLE_",
    "TF_FORCE_",
    "TF_GPU_",
    "TF_XLA_",
)

_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./+@:-]+\Z")
_IFACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}\Z")  # an interface name, not a subnet


@dataclass(frozen=True, slots=True)
class Command:
    """``argv``, run with the launcher's environment plus ``env``, less the names in ``unset``.
    ``secrets``: values that reach the ranks by the file ``RINGTRAIN_ENV_FILE`` names,
    written on every host before the start (launch/job/deliver.py), never in the environment of
    the command itself (mpirun and horovodrun; not srun)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    withheld: tuple[str, ...] = ()  # the launcher's own variables kept from the ranks

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The command's whole environment, on top of the launcher's own ``base``."""
        env = {**base, **dict(self.env)}
        for name in (*self.unset, *self.withheld):
            env.pop(name, None)
        return env


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """Everything a backend needs besides the allocation. Plain data, gathered by make_plan."""

    python: str
    script: str
    script_args: tuple[str, ...]
    hostfile: Path
    env_delta: tuple[tuple[str, str], ...]
    forward: tuple[str, ...]
    is_root: bool
    ssh_config: Path | None = None
    tcp_include: str | None = None
    network_interface: str | None = None
    gloo: bool = False
    # the MCA parameters the user's mpi_args and the launcher's OMPI_MCA_* set: theirs win
    user_mca: mca.UserMca = field(default_factory=mca.UserMca)
    entry: Entry = Entry.SCRIPT
    mpi_args: tuple[str, ...] = ()
    srun_args: tuple[str, ...] = ()  # --srun-args: srun's own options, the user's
    srun_mpi: str | None = DEFAULT_MPI  # srun's --mpi (slurm_options.srun_mpi); None: theirs
    launcher_path: str = "/usr/bin:/bin"  # the launcher's PATH (horovodrun's finds the shim)
    elastic: ElasticPolicy | None = None  # --elastic: horovodrun's elastic driver
    # the secret variables (secretvars.by_file), and the file (the same
    # string on every host) they go to instead; ``forward`` names the file, not them
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    secrets_file: str = ""


class LauncherBackend(Protocol):
    def build(self, alloc: Allocation, ctx: LaunchContext) -> Command: ...


# Kept from the ranks unless ``--env`` names them: each rank takes the GPU of its local rank
# (Horovod's pinning recipe, ``gpus[hvd.local_rank()]``), so the launching shell's list would
# hide GPUs from local ranks 1-7, or all of them where it is empty (a login node). horovodrun's
# environment filter drops it too, and the DeepSpeed launcher deletes it.
WITHHELD_NAMES = ("CUDA_VISIBLE_DEVICES",)


def forwarded_names(
    environ: Mapping[str, str], delta: Mapping[str, str], extra: Sequence[str]
) -> tuple[str, ...]:
    """Names to pass with ``-x``: the fixed list and prefixes when set, ringtrain's own
    variables as the launcher sets them for this run (``delta``), plus ``--env`` names."""
    names = dict.fromkeys(n for n in FORWARD_NAMES if n in environ or n in delta)
    for name in sorted(set(environ) | set(delta)):
        if name.startswith(FORWARD_PREFIXES):
            names[name] = None
    for name in sorted(delta):
        if name.startswith(envvars.PREFIX):
            names[name] = None
    for name in extra:
        names[name] = None
    return tuple(names)


# The AWS keys reach a rank only where it needs them: a checkpoint on S3, or ``--env`` naming one
AWS_KEY_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def withheld_names(
    environ: Mapping[str, str], delta: Mapping[str, str], extra: Sequence[str],
    *, aws_keys: bool = True,
) -> tuple[str, ...]:
    """Names in the launcher's environment that reach no rank: ``WITHHELD_NAMES``, the
    launcher's own settings (``RINGTRAIN_HOSTS``, ``RINGTRAIN_PYTHON``, any ``RINGTRAIN_*``
    it does not set for the ranks) and, without ``aws_keys`` (no checkpoint on S3), the AWS
    keys, unless ``--env`` names them. They leave the launcher command's environment too: its
    ranks on the launcher's host would inherit them. The simulated cluster's
    ``RINGTRAIN_SIM_*`` stay: its sshd sets them for all on a host."""
    asked = {*delta, *extra}
    return tuple(name for name in sorted(environ) if name not in asked and (
        name in WITHHELD_NAMES or (not aws_keys and name in AWS_KEY_NAMES)
        or (name.startswith(envvars.PREFIX) and not name.startswith(SIM_HOST_PREFIX))))


SIM_HOST_PREFIX = "RINGTRAIN_SIM_"


def rank_argv(ctx: LaunchContext, *, mpi: bool) -> tuple[str, ...]:
    """The per-rank command, through ``ringtrain.rank.entry``: line-buffered output (so
    Open MPI's per-line rank tags stay intact) and, under MPI, mpi4py's runner, which turns an
    uncaught exception in one rank into MPI_Abort of the whole job instead of a hang."""
    wrapper = ("-m", "ringtrain.rank.entry", *(("--mpi",) if mpi else ()))
    kind = {Entry.SCRIPT: (), Entry.MODULE: ("-m",), Entry.EXECUTABLE: ("--exec",)}[ctx.entry]
    return (ctx.python, *wrapper, *kind, ctx.script, *ctx.script_args)


def _check_path(path: Path, what: str) -> str:
    text = str(path)
    if not _SAFE_PATH_RE.match(text):
        raise UsageError(
            f"{what} path {text!r} contains spaces or shell characters; mpirun splits it",
            f"move {what} to a path of letters, digits and ./_-",
        )
    return text


class OpenMpiBackend:
    """Open MPI ``mpirun`` with the settings horovodrun uses, but only named variables forwarded."""

    def build(self, alloc: Allocation, ctx: LaunchContext) -> Command:
        argv: list[str] = ["mpirun"]
        if ctx.is_root:
            argv.append("--allow-run-as-root")
        argv += ["--hostfile", str(ctx.hostfile), "-np", str(alloc.np)]
        argv += ["-bind-to", "none", "-map-by", "slot", "--tag-output"]
        # each parameter once (mpirun refuses one named twice): the user's or the site's
        # own (mca.choose) in place of ringtrain's
        argv += mca.kept_argv(mpirun_mca(alloc, ctx))
        for name in ctx.forward:
            argv += ["-x", name]
        argv += ctx.mpi_args  # --mpi-arg: the user's, as they are
        argv += rank_argv(ctx, mpi=True)
        return by_file(tuple(argv), dict(ctx.env_delta), ctx)


def mpirun_mca(alloc: Allocation, ctx: LaunchContext) -> tuple[mca.Choice, ...]:
    """ringtrain's ``-mca`` settings for mpirun, each kept or left out for the user's own."""
    ours = [("pml", "ob1"), ("btl", "^openib")]
    if not alloc.is_local_only:
        mca.check_loopback(ctx.user_mca)
    if not alloc.is_local_only and ctx.ssh_config is not None:
        # Open MPI's own spawn (plm_rsh_no_tree_spawn turned off mpirun's notice of a
        # daemon or ssh session lost mid-run): past OMPI_TREE_RADIX hosts, daemons run
        # this ssh on the hosts, so make_plan names the config by its path there
        ours.append((mca.RSH_AGENT, f"ssh -F {_check_path(ctx.ssh_config, 'ssh config')}"))
    if ctx.tcp_include:  # the network the probe chose (or --network-interface)
        ours += [("btl_tcp_if_include", ctx.tcp_include),
                 ("oob_tcp_if_include", ctx.tcp_include)]
    return mca.choose(ours, ctx.user_mca)


def mca_notes(backend: Backend, alloc: Allocation, ctx: LaunchContext) -> tuple[str, ...]:
    """The plan's lines on MCA parameters set outside ringtrain (mca.describe)."""
    if backend is Backend.MPIRUN:
        return tuple(mca.describe(mpirun_mca(alloc, ctx), "mpirun"))
    if backend is Backend.HOROVODRUN and not ctx.gloo:
        _, notes = _horovodrun_mpi_args(alloc, ctx)
        return tuple(mca.describe(notes, "horovodrun"))
    return ()


HVD_DRIVER = "ringtrain.hvd_driver"  # horovodrun under --elastic
# --elastic: a Gloo pair waits this many Gloo timeouts for its peer's first connection
# (ringtrain's Horovod patch; Gloo's own 5 held every survivor 150 s when a peer died while the
# ring formed again); --env HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR=N sets another
CONNECT_FACTOR = ("HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR", "1")
# Open MPI 4.1's routed_radix: mpirun starts this many daemons itself, they start the rest
OMPI_TREE_RADIX = 64


class HorovodrunBackend:
    """``horovodrun``: MPI (default) or Gloo. horovodrun forwards the environment itself."""

    def build(self, alloc: Allocation, ctx: LaunchContext) -> Command:
        # horovodrun lives next to the Python it belongs to (a virtualenv need not be on PATH);
        # under --elastic it is horovodrun with one rule of its driver changed (hvd_driver.py:
        # a healthy host's dead process is refilled, not the host blacklisted), isolated (-I)
        # from the working directory
        horovodrun = str(Path(ctx.python).parent / "horovodrun")
        argv = [horovodrun] if ctx.elastic is None else [
            *isolated.module_argv(ctx.python, HVD_DRIVER)]
        argv += ["-np", str(alloc.np)]
        delta = dict(ctx.env_delta)
        if ctx.elastic is None:
            argv += ["-H", render_horovod_hosts(alloc.hosts)]
        else:
            named = ctx.network_interface if _IFACE_RE.match(ctx.network_interface or "") else None
            argv += elastic_args(alloc, ctx.elastic, ctx.hostfile.parent / DISCOVERY,
                                 named or delta.get("HOROVOD_GLOO_IFACE"))
            delta.setdefault(*CONNECT_FACTOR)
        argv.append("--gloo" if ctx.gloo else "--mpi")
        if ctx.ssh_config is not None and not alloc.is_local_only:
            # its ssh (and its mpirun's) is found on PATH: ringtrain's shim comes first
            shim = _check_path(ctx.ssh_config.parent / SHIM_DIR, "run directory")
            if ":" in shim:  # a PATH entry: split there, horovodrun would find the real ssh
                raise UsageError(f"run directory {shim!r} has a ':', which PATH cannot hold",
                                 "use a --runs-dir without ':'")
            delta["PATH"] = f"{shim}:{delta.get('PATH', ctx.launcher_path)}"
            delta[envvars.LAUNCHER_BIN] = shim  # horovodrun's PATH reaches every rank: off it
        if ctx.network_interface and not alloc.is_local_only and ctx.elastic is None:
            argv += ["--network-interface", ctx.network_interface]
        unset: tuple[str, ...] = ()
        if not ctx.gloo:
            words, notes = _horovodrun_mpi_args(alloc, ctx)
            if words:
                argv += ["--mpi-args", shlex.join(words)]
            # its mpirun's ssh is the shim on PATH: a site's agent would bypass it
            unset = tuple(v for c in notes if c.name == mca.RSH_AGENT
                          for v in ctx.user_mca.env_vars(c.name))
        argv += rank_argv(ctx, mpi=not ctx.gloo)
        # Gloo puts `env K=V ...` for its whole environment into every rank's command line,
        # MPI `-x K` for each into its mpirun's: the secrets go by file
        return by_file(tuple(argv), delta, ctx, unset=unset)


def _horovodrun_mpi_args(alloc: Allocation, ctx: LaunchContext,
                         ) -> tuple[tuple[str, ...], tuple[mca.Choice, ...]]:
    """horovodrun --mpi's ``--mpi-args`` words and the notes on them (mca.for_horovodrun),
    with ringtrain's ssh kept over a site's OMPI_MCA_plm_rsh_agent (left out of horovodrun's
    environment: its mpirun then runs the shim, ``ssh`` on PATH)."""
    remote = not alloc.is_local_only
    nics = ctx.network_interface if remote and ctx.elastic is None else None
    words, notes = mca.for_horovodrun(ctx.mpi_args, ctx.user_mca, remote=remote, nics=nics)
    site = ctx.user_mca.setter(mca.RSH_AGENT)
    if remote and ctx.ssh_config is not None and site is not None:
        notes += (mca.Choice(mca.RSH_AGENT, f"ssh (ringtrain's {SHIM_DIR}/ssh on PATH; the "
                             "variable unset for horovodrun)", kept=True, by=site),)
    return words, notes


def by_file(argv: tuple[str, ...], delta: dict[str, str], ctx: LaunchContext, *,
            unset: tuple[str, ...] = ()) -> Command:
    """The command, its secrets (``ctx.secrets``) out of its environment and in the file
    ``RINGTRAIN_ENV_FILE`` names (written on every host before the start: deliver.py);
    ``unset``: more of the launcher's variables the command must not see."""
    if not ctx.secrets:
        return Command(argv=argv, env=tuple(sorted(delta.items())), unset=unset)
    hidden = tuple(name for name, _ in ctx.secrets)
    env = [(k, v) for k, v in delta.items() if k not in hidden]
    env.append((envvars.ENV_FILE, ctx.secrets_file))
    return Command(argv=argv, env=tuple(sorted(env)), unset=(*hidden, *unset),
                   secrets=ctx.secrets)


class SrunBackend:
    """``srun --mpi=pmix`` inside a Slurm allocation: Slurm starts, wires up and tracks the ranks.
    The MPI plugin: ``SLURM_MPI_TYPE`` when the launcher has it, or the user's own ``--mpi``
    among their srun options (``--srun-args``, after ringtrain's, before the rank command).

    Placement follows the allocation exactly: ``--ntasks-per-node`` when every host runs the same
    number of ranks, else ``--distribution=arbitrary`` with one node name per rank. Variables go
    by ``--export=ALL,NAME,...``: srun passes its own environment (which holds the launcher's
    delta), the names only document what ringtrain means to forward; no value is in argv. The
    secrets are not in that environment either: they go by file (``by_file``), as under
    mpirun."""

    def build(self, alloc: Allocation, ctx: LaunchContext) -> Command:
        names = [h.name for h in alloc.hosts]
        argv = ["srun", *([f"--mpi={ctx.srun_mpi}"] if ctx.srun_mpi else []),
                f"--nodes={len(names)}", f"--ntasks={alloc.np}"]
        counts = {h.slots for h in alloc.hosts}
        if len(counts) == 1:
            argv += [f"--ntasks-per-node={counts.pop()}", "--nodelist=" + ",".join(names)]
        else:
            per_rank = [r.host for r in sorted(alloc.ranks, key=lambda r: r.rank)]
            argv += ["--distribution=arbitrary", "--nodelist=" + ",".join(per_rank)]
        argv += ["--kill-on-bad-exit=1", "--label", "--export=" + ",".join(("ALL", *ctx.forward))]
        argv += ctx.srun_args  # checked: none of the options above (slurm_options.py)
        argv += rank_argv(ctx, mpi=True)
        env = dict(ctx.env_delta)
        # the launcher's own OMPI_MCA_btl_tcp_if_include (or _exclude) wins, as under mpirun
        if ctx.tcp_include and ctx.user_mca.setter(*mca.YIELDS_TO["btl_tcp_if_include"]) is None:
            env.setdefault("OMPI_MCA_btl_tcp_if_include", ctx.tcp_include)
        # srun ships its whole environment to every node's slurmd: the secrets go by file
        return by_file(tuple(argv), env, ctx)


SHIM_DIR = "bin"
DISCOVERY = "discover-hosts"  # --elastic: the attempt's host discovery script
ELASTIC_HOSTS = "elastic-hosts"  # ... and the file it prints: host:slots lines
ELASTIC_SPARES = "elastic-spares"  # ... and beside it, the warm spare slots (hvd_driver reads)


def elastic_args(alloc: Allocation, el: ElasticPolicy, discovery: Path,
                 nic: str | None) -> list[str]:
    """horovodrun's elastic flags: the hosts come from ringtrain's discovery script (it prints
    the hosts the pre-flight passed), and the interface the pre-flight chose is named, which
    also spares horovodrun its own interface search (and lets one host run elastic)."""
    low, high = el.cooldown_range
    colons = [h.name for h in alloc.hosts if ":" in h.name]
    if colons:  # Horovod reads the discovery script's lines as host:slots
        raise UsageError(f"--elastic: Horovod cannot read host {colons[0]} (an IPv6 address) "
                         "from its discovery script", "name the hosts, e.g. in /etc/hosts")
    argv = ["--min-np", str(min(el.min_np, alloc.np)), "--max-np", str(el.max_np or alloc.np),
            "--host-discovery-script", _check_path(discovery, "discovery script"),
            "--elastic-timeout", str(el.timeout_s),
            "--blacklist-cooldown-range", str(low), str(max(low, high))]
    nic = nic or ("lo" if alloc.is_local_only else None)  # one host, no probe: loopback
    return argv + (["--network-interface", nic] if nic else [])


def discovery_script(hosts_file: Path) -> str:
    """The ``--host-discovery-script`` horovodrun runs (through a shell) every second."""
    return ("#!/bin/sh\n# Written by ringtrain: the hosts Horovod's elastic driver may use\n"
            f"exec cat {shlex.quote(str(hosts_file))}\n")


def ssh_shim(ssh: str, ssh_config: Path) -> str:
    """The ``ssh`` horovodrun runs (it finds ssh on PATH and takes no config file): the real
    one with ringtrain's ssh_config, host keys checked strictly and no password prompt.
    horovodrun's own ``-o StrictHostKeyChecking=no`` comes later on the command line, and ssh
    takes the first value it is given, so the keys the pre-flight verified are the ones
    required. Its mpirun (``--mpi``) finds the same ssh."""
    options = ("-F", str(ssh_config), "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes")
    return ("#!/bin/sh\n# Written by ringtrain: horovodrun's ssh (see ringtrain/launch/"
            f"launchers.py, ssh_shim)\nexec {shlex.join((ssh, *options))} \"$@\"\n")


def backend_for(backend: Backend) -> LauncherBackend:
    if backend is Backend.MPIRUN:
        return OpenMpiBackend()
    if backend is Backend.SRUN:
        return SrunBackend()
    return HorovodrunBackend()
