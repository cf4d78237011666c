"""Values of the simulated cluster: what was asked for (SimConfig) and what was built (SimCluster).

Everything here is pure: names, addresses and paths are derived from the config, so ``down``
can find and remove a cluster's namespaces and links by name even when its state dir is gone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ringtrain.errors import SimError

DEFAULT_NAME = "rt"
DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
HOST_PREFIX = "gpu"
SSH_PORT = 22
FIRST_HOST_OFFSET = 11  # gpu01 gets network+11, the bridge (root namespace) network+1
AUTO_SUBNETS = tuple(f"10.213.{i}.0/24" for i in range(7, 255))

_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./+@-]+$")


RUN_DIR = Path("/run/ringtrain-sim")  # locks and the name -> state dir registry (gone at reboot)


def registry_file(name: str) -> Path:
    return RUN_DIR / f"{name}.state_dir"


def default_state_dir(name: str) -> Path:
    """Where cluster ``name`` keeps its files: ``$RINGTRAIN_SIM_DIR/<name>`` if set, else the dir
    it was built in when it is up (so ``status``/``down`` work from any directory), else
    ``./.sim/<name>`` (``.sim/`` is git-ignored)."""
    base = os.environ.get("RINGTRAIN_SIM_DIR")
    if base:
        return Path(base) / name
    try:
        recorded = registry_file(name).read_text().strip()
    except OSError:
        recorded = ""
    return Path(recorded) if recorded else Path.cwd() / ".sim" / name


def default_python_bin() -> Path:
    """The bin dir of the running interpreter (the venv's): put on the sim hosts' PATH."""
    return Path(sys.executable).parent


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What to build. ``subnet=None`` means: the one this cluster already has, else the first
    free 10.213.X.0/24 that no route or address on this machine overlaps."""

    name: str = DEFAULT_NAME
    hosts: int = 4
    subnet: str | None = None
    state_dir: Path | None = None
    gpus_per_host: int = 4
    gpu_model: str = DEFAULT_MODEL
    python_bin: Path | None = None
    hosts_in_etc_hosts: bool = True

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise SimError(
                f"sim cluster name {self.name!r} is not 1-8 lower-case letters and digits",
                hint="namespace and link names are built from it (15-character limit); "
                "pass e.g. --name rt2",
            )
        if not 1 <= self.hosts <= 99:
            raise SimError(f"--hosts {self.hosts}: a sim cluster has 1 to 99 hosts",
                           hint="pass --hosts between 1 and 99")
        if not 0 <= self.gpus_per_host <= 16:
            raise SimError(f"--gpus {self.gpus_per_host}: 0 to 16 GPUs per host are simulated",
                           hint="pass --gpus between 0 and 16")
        if self.subnet is not None:
            check_subnet(self.subnet, self.hosts)
        path = str(self.resolved_state_dir)
        if not SAFE_PATH_RE.match(path):
            raise SimError(
                f"sim state dir {path!r} contains spaces or shell-special characters",
                hint="ssh -F and mpirun's plm_rsh_agent take this path unquoted; "
                "pass --state-dir with a plain path",
            )

    @property
    def resolved_state_dir(self) -> Path:
        return (self.state_dir or default_state_dir(self.name)).absolute()

    @property
    def resolved_python_bin(self) -> Path:
        return self.python_bin or default_python_bin()

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(host_name(self.name, i) for i in range(1, self.hosts + 1))

    @property
    def bridge(self) -> str:
        return f"{self.name}-br"

    def netns(self, host: str) -> str:
        """``<cluster>-gpuNN``, whatever the host is called (within the 15-character limit)."""
        return f"{self.name}-{HOST_PREFIX}{self.host_index(host):02d}"

    def veth(self, host: str) -> str:
        """Root-namespace end of the host's veth pair (the host's end is ``eth0``)."""
        return self.netns(host)

    def host_index(self, host: str) -> int:
        """1 for the first host; a name this cluster does not have is a SimError."""
        try:
            return self.host_names.index(host) + 1
        except ValueError:
            raise SimError(f"sim cluster {self.name!r} has no host {host!r}",
                           hint=f"its hosts are {', '.join(self.host_names)}") from None


def host_name(cluster: str, index: int) -> str:
    """``gpu01`` on the default cluster, ``<cluster>-gpu01`` on any other: two clusters up at
    once never share a name, so /etc/hosts (whose first line wins) names each host once."""
    short = f"{HOST_PREFIX}{index:02d}"
    return short if cluster == DEFAULT_NAME else f"{cluster}-{short}"


def check_subnet(subnet: str, hosts: int) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as err:
        raise SimError(f"subnet {subnet!r} is not an IPv4 network: {err}",
                       hint="pass e.g. --subnet 10.213.7.0/24") from err
    if not net.is_private:
        raise SimError(f"subnet {subnet} is not a private range",
                       hint="use an RFC 1918 range such as 10.213.7.0/24")
    if net.num_addresses < FIRST_HOST_OFFSET + hosts + 1:
        raise SimError(f"subnet {subnet} is too small for {hosts} hosts",
                       hint="use a /24")
    return net


@dataclass(frozen=True, slots=True)
class SimHost:
    """One simulated host. ``dir`` holds its sshd config, host key, GPU state and fakes."""

    name: str
    address: str
    netns: str
    veth: str
    dir: Path

    @property
    def gpu_state_file(self) -> Path:
        return self.dir / "gpu.json"

    @property
    def bin_dir(self) -> Path:
        """Per-host overrides, first on the host's PATH (e.g. a fake ``mpirun --version``)."""
        return self.dir / "bin"

    @property
    def cpu_training_flag(self) -> Path:
        """Present: the host declares that its fake GPUs train on the CPU (the probe passes its
        tensorflow-cpu and NCCL-less Horovod); ``ops.declare_cpu_training`` removes it."""
        return self.dir / "trains-on-cpu"

    @property
    def sysfs_dir(self) -> Path:
        """The host's fake /sys (``$RINGTRAIN_SIM_SYSFS``): its interfaces and RDMA ports."""
        return self.dir / "sys"

    @property
    def site_dir(self) -> Path:
        """On the host's PYTHONPATH: fake ``*.dist-info`` dirs live here (see set_versions)."""
        return self.dir / "site"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def sshd_pid_file(self) -> Path:
        return self.dir / "sshd.pid"

    @property
    def holder_pid_file(self) -> Path:
        return self.dir / "holder.pid"


@dataclass(frozen=True, slots=True)
class SimCluster:
    """A built cluster: where its hosts are and the files a client needs to reach them."""

    name: str
    subnet: str
    bridge: str
    bridge_address: str
    state_dir: Path
    hosts: tuple[SimHost, ...]
    user: str = "root"
    config: SimConfig = field(default_factory=SimConfig)

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def identity_file(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def hostfile(self) -> Path:
        """Open MPI hostfile: ``gpu01 slots=4`` per host."""
        return self.state_dir / "hostfile"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    @property
    def addresses(self) -> dict[str, str]:
        return {h.name: h.address for h in self.hosts}

    def host(self, name: str) -> SimHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise SimError(f"no host {name!r} in sim cluster {self.name!r}",
                       hint=f"hosts are {', '.join(self.names)}")

    def ssh_argv(self, host: str, *command: str) -> tuple[str, ...]:
        """``ssh -F <ssh_config> <host> <command...>`` as an argv tuple."""
        return ("ssh", "-F", str(self.ssh_config), host, *command)

    @property
    def mpirun_mca_args(self) -> tuple[str, ...]:
        """The MCA settings Open MPI's mpirun needs to reach these hosts (see STACK.md)."""
        return (
            "--mca", "plm_rsh_agent", f"ssh -F {self.ssh_config}",
            "--mca", "oob_tcp_if_include", self.subnet,
            "--mca", "btl_tcp_if_include", self.subnet,
        )


def build_cluster(cfg: SimConfig, subnet: str) -> SimCluster:
    """Derive every name, address and path of ``cfg`` built on ``subnet``. The cluster's
    ``config`` has subnet, state dir and python bin resolved: pass it to the other functions."""
    net = check_subnet(subnet, cfg.hosts)
    state = cfg.resolved_state_dir
    hosts = tuple(
        SimHost(
            name=name,
            address=str(net.network_address + FIRST_HOST_OFFSET + i),
            netns=cfg.netns(name),
            veth=cfg.veth(name),
            dir=state / "hosts" / name,
        )
        for i, name in enumerate(cfg.host_names)
    )
    return SimCluster(
        name=cfg.name,
        subnet=str(net),
        bridge=cfg.bridge,
        bridge_address=str(net.network_address + 1),
        state_dir=state,
        hosts=hosts,
        config=replace(cfg, subnet=str(net), state_dir=state, python_bin=cfg.resolved_python_bin),
    )


def config_to_json(cfg: SimConfig, subnet: str) -> str:
    data: dict[str, Any] = asdict(cfg)
    data["state_dir"] = str(cfg.resolved_state_dir)
    data["python_bin"] = str(cfg.resolved_python_bin)
    data["subnet"] = subnet
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def config_from_json(text: str) -> SimConfig:
    data = json.loads(text)
    data["state_dir"] = Path(data["state_dir"])
    data["python_bin"] = Path(data["python_bin"])
    return SimConfig(**data)
