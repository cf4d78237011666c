"""Look at a running sim cluster and inject faults into it.

Every function takes the SimConfig naming the cluster (only ``name`` and ``state_dir`` matter)
and a host name such as ``gpu03``. Faults last until undone or until ``up`` repairs them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ringtrain.errors import SimError
from ringtrain.rank.procfs import cmdline
from ringtrain.sim import gpufaults, netns, sshd
from ringtrain.sim.cluster import cluster, load, require_root
from ringtrain.sim.config import SimConfig
from ringtrain.sim.gpus import (
    fake_versions,
    read_state,
    set_fake_versions,
    updated_state,
    write_state,
)
from ringtrain.sim.proc import pids_in_netns

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HostStatus:
    name: str
    address: str
    netns: bool
    link_up: bool
    sshd_pid: int | None
    gpus: int
    gpu_model: str
    gpu_mode: str
    versions: tuple[tuple[str, str], ...]

    @property
    def reachable(self) -> bool:
        return self.netns and self.link_up and self.sshd_pid is not None


@dataclass(frozen=True, slots=True)
class SimStatus:
    name: str
    state_dir: Path
    up: bool
    subnet: str | None
    hosts: tuple[HostStatus, ...]
    leftovers: tuple[str, ...] = ()  # namespaces/links of this name with no recorded cluster


def status(cfg: SimConfig) -> SimStatus:
    built = load(cfg)
    present = set(netns.existing_netns(cfg.name))
    if built is None:
        left = tuple(sorted(present | set(netns.existing_links(cfg.name))))
        return SimStatus(cfg.name, cfg.resolved_state_dir, False, None, (), left)
    hosts = []
    for h in built.hosts:
        state = read_state(h.gpu_state_file) or {}
        hosts.append(HostStatus(
            name=h.name,
            address=h.address,
            netns=h.netns in present,
            link_up=netns.link_is_up(h.veth),
            sshd_pid=sshd.sshd_pid(h),
            gpus=len(state.get("gpus", [])),
            gpu_model=str(state.get("model", "?")),
            gpu_mode=str(state.get("mode", "missing")),
            versions=tuple(sorted(fake_versions(h.site_dir, h.bin_dir).items())),
        ))
    return SimStatus(cfg.name, built.state_dir, True, built.subnet, tuple(hosts))


def set_gpus(cfg: SimConfig, host: str, count: int | str, model: str | None = None) -> None:
    """GPU count (0-16), ``'fail'`` (nvidia-smi fails: driver message, exit 9) or ``'ok'``;
    ``model`` changes the GPU name (and memory, for known models)."""
    c = cluster(cfg)
    h = c.host(host)
    state = updated_state(read_state(h.gpu_state_file), c.name, h.name, count, model,
                          c.config.gpu_model)
    write_state(h.gpu_state_file, state)
    gpufaults.write_sysfs(h.sysfs_dir, state)
    log.info("%s: %d x %s, driver %s", host, len(state["gpus"]), state["model"], state["mode"])


def gpu_fault(cfg: SimConfig, host: str, gpu: int, fault: gpufaults.Fault | None) -> None:
    """Make ``fault`` on ``host``'s GPU ``gpu`` (None: every fault cleared), as the doctor
    will read it: fake nvidia-smi, dmesg and sysfs (gpufaults.py)."""
    h = cluster(cfg).host(host)
    state = read_state(h.gpu_state_file)
    if state is None:
        raise SimError(f"{host} has no GPU state", hint=f"ringtrain sim set-gpus {host} 8")
    if fault is None:
        state = gpufaults.healthy(state)
    else:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        state = gpufaults.apply(state, gpu, fault, uptime)
    write_state(h.gpu_state_file, state)
    gpufaults.write_sysfs(h.sysfs_dir, state)
    log.info("%s: GPU %d faults %s", host, gpu, fault or "cleared")


def declare_cpu_training(cfg: SimConfig, host: str, declared: bool) -> None:
    """Whether ``host`` declares that its fake GPUs train on the CPU (``up`` declares it on
    every host, so the demo runs on tensorflow-cpu); undeclared, the pre-flight refuses the
    host as it would a real GPU host with tensorflow-cpu (probe/stack.py)."""
    flag = cluster(cfg).host(host).cpu_training_flag
    if declared:
        flag.write_text("the fake GPUs train on the CPU (tensorflow-cpu, no NCCL)\n")
    else:
        flag.unlink(missing_ok=True)


def set_link(cfg: SimConfig, host: str, up: bool) -> None:
    """Take ``host``'s link down (it vanishes from the network, open connections hang) or up."""
    require_root()
    h = cluster(cfg).host(host)
    netns.set_link(h.veth, up)
    log.info("%s: link %s", host, "up" if up else "down")


def stop_sshd(cfg: SimConfig, host: str) -> bool:
    """Stop ``host``'s listening sshd (new ssh connections are refused; sessions stay)."""
    require_root()
    return sshd.stop_sshd(cluster(cfg).host(host))


def start_sshd(cfg: SimConfig, host: str) -> None:
    require_root()
    sshd.start_sshds([cluster(cfg).host(host)])


def rotate_host_key(cfg: SimConfig, host: str, *, update_known_hosts: bool = False) -> str:
    """Give ``host`` a new host key and restart its sshd. known_hosts keeps the old key unless
    ``update_known_hosts``, so strict ssh refuses the host (what a reinstalled or spoofed host
    looks like). Returns the new public key."""
    require_root()
    c = cluster(cfg)
    h = c.host(host)
    was_running = sshd.stop_sshd(h)
    h.host_key.unlink(missing_ok=True)
    h.host_key.with_suffix(".pub").unlink(missing_ok=True)
    sshd.generate_keys([(h.host_key, f"{h.name}-{c.name}")])
    if was_running:
        sshd.start_sshds([h])
    if update_known_hosts:
        c.known_hosts.write_text(sshd.render_known_hosts(c))
    log.info("%s: new host key%s", host, " (known_hosts updated)" if update_known_hosts else "")
    return sshd.public_key(h.host_key)


def set_versions(cfg: SimConfig, host: str, versions: Mapping[str, str | None] | None = None,
                 **more: str | None) -> None:
    """Fake installed versions on ``host``: ``set_versions(cfg, 'gpu02', horovod='0.27.0')``,
    ``{'tensorflow-cpu': '2.14.0'}``, ``mpirun='4.0.3'``; a value of None removes the fake.
    See gpus.py for the mechanism (PYTHONPATH dist-info; an mpirun --version wrapper)."""
    h = cluster(cfg).host(host)
    set_fake_versions(h.site_dir, h.bin_dir, {**(versions or {}), **more})


def clear_versions(cfg: SimConfig, host: str) -> None:
    h = cluster(cfg).host(host)
    set_fake_versions(h.site_dir, h.bin_dir, dict.fromkeys(fake_versions(h.site_dir, h.bin_dir)))


def host_processes(cfg: SimConfig, host: str) -> tuple[tuple[int, str], ...]:
    """``(pid, cmdline)`` of every process in ``host``'s network namespace (found by namespace
    inode, not by name): the holder, sshd, and whatever ssh sessions and jobs started there."""
    ns = netns.netns_path(cfg.netns(host))
    if cfg.netns(host) not in netns.existing_netns(cfg.name):
        raise SimError(f"{host}: no namespace {cfg.netns(host)}",
                       hint=f"is sim {cfg.name!r} up? `ringtrain sim status --name {cfg.name}`")
    return tuple((pid, cmdline(pid)) for pid in pids_in_netns(ns))
