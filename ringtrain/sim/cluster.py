"""Bring a simulated cluster up and down; query it; inject faults.

``up`` is idempotent: the same config on a healthy cluster changes nothing; the same config on a
damaged one (link down, sshd stopped) repairs it; anything else (another host count, a half-built
cluster) is torn down and built again. ``down`` finds what to remove by name (namespaces
``<name>-gpuNN``, links ``<name>-br``/``<name>-gpuNN``, the /etc/hosts block, every process in
those namespaces), so it also clears half-built states and clusters whose state dir is gone.
Keys stay in the state dir across down/up, so known_hosts stays valid for a user.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from ringtrain.errors import SimError
from ringtrain.sim import etc_hosts, gpufaults, netns, sshd
from ringtrain.sim.config import (
    SimCluster,
    SimConfig,
    build_cluster,
    config_from_json,
    config_to_json,
    registry_file,
)
from ringtrain.sim.gpus import make_state, write_state
from ringtrain.sim.proc import locked, pids_in_netns, read_pid, stop_pids

log = logging.getLogger(__name__)

_TOOLS = ("ip", "unshare", "nsenter", "mount", "ssh", "ssh-keygen")
_STATE_FILES = ("cluster.json", "ssh_config", "known_hosts", "hostfile", "authorized_keys",
                "blank", "id_ed25519", "id_ed25519.pub")


def require_root() -> None:
    if os.geteuid() != 0:
        raise SimError(
            "ringtrain sim needs root: it creates network namespaces, links and sshd processes",
            hint="run it as root, e.g. `sudo ringtrain sim up` (in CI the runner is root)",
        )


def require_tools() -> None:
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if not Path(sshd.SSHD).exists():
        missing.append(sshd.SSHD)
    if missing:
        raise SimError(f"missing tools for the sim cluster: {', '.join(missing)}",
                       hint="apt-get install -y iproute2 util-linux openssh-server openssh-client")


def load(cfg: SimConfig) -> SimCluster | None:
    """The cluster recorded in ``cfg``'s state dir (None when it was never built or is down)."""
    try:
        recorded = config_from_json((cfg.resolved_state_dir / "cluster.json").read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if recorded.subnet is None:
        return None
    return build_cluster(recorded, recorded.subnet)


def cluster(cfg: SimConfig) -> SimCluster:
    """The cluster that is up under ``cfg``'s name, or SimError."""
    built = load(cfg)
    if built is None:
        raise SimError(f"sim cluster {cfg.name!r} is not up "
                       f"(no {cfg.resolved_state_dir}/cluster.json)",
                       hint=f"run `ringtrain sim up --name {cfg.name}`")
    return built


def _same_config(cfg: SimConfig, built: SimCluster) -> bool:
    rec = built.config
    return (cfg.hosts, cfg.gpus_per_host, cfg.gpu_model, cfg.hosts_in_etc_hosts,
            cfg.resolved_python_bin, cfg.subnet or rec.subnet) == (
            rec.hosts, rec.gpus_per_host, rec.gpu_model, rec.hosts_in_etc_hosts,
            rec.resolved_python_bin, rec.subnet)


def up(cfg: SimConfig) -> SimCluster:
    """Build (or repair, or keep) the cluster described by ``cfg``; returns it once every sshd
    listens."""
    require_root()
    require_tools()
    started = time.monotonic()
    with locked("clusters"):  # one lock for all: up/down take < 1 s; subnets are chosen safely
        built = load(cfg)
        if built is not None and _same_config(cfg, built) and _repair(built):
            log.info("sim %s already up (checked in %.2f s)", cfg.name, time.monotonic() - started)
            return built
        _teardown(cfg)
        subnet = cfg.subnet or (built.subnet if built else None)
        if subnet is None or (cfg.subnet is None and netns.subnet_conflict(subnet, cfg.bridge)):
            subnet = netns.choose_subnet(cfg)
        new = build_cluster(cfg, subnet)
        netns.require_free_subnet(new)
        try:
            _build(new)
        except BaseException:
            _teardown(cfg)
            raise
    log.info("sim %s up: %d hosts on %s in %.2f s", cfg.name, len(new.hosts), new.subnet,
             time.monotonic() - started)
    return new


def _repair(built: SimCluster) -> bool:
    """Bring a damaged but complete cluster back (links up, sshd started); False if incomplete."""
    present = set(netns.existing_netns(built.name))
    if any(h.netns not in present or sshd.holder_pid(h) is None for h in built.hosts):
        return False
    for host in built.hosts:
        if not netns.link_is_up(host.veth):
            netns.set_link(host.veth, True)
    sshd.start_sshds(built.hosts)
    if built.config.hosts_in_etc_hosts:
        etc_hosts.add(built.name, built.addresses)
    return True


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def _build(c: SimCluster) -> None:
    cfg = c.config
    for d in (c.state_dir / "bin", *(h.dir for h in c.hosts)):
        d.mkdir(parents=True, exist_ok=True)
    sshd.generate_keys([(c.identity_file, f"ringtrain-sim-{c.name}"),
                        *((h.host_key, f"{h.name}-{c.name}") for h in c.hosts)])
    _write(c.state_dir / "authorized_keys", sshd.public_key(c.identity_file) + "\n", 0o600)
    _write(c.known_hosts, sshd.render_known_hosts(c))
    _write(c.ssh_config, sshd.render_ssh_config(c))
    _write(c.hostfile, "".join(f"{h.name} slots={max(cfg.gpus_per_host, 1)}\n" for h in c.hosts))
    _write(c.state_dir / "blank", "")
    sshd.install_fake_nvidia_smi(c.state_dir / "bin")
    etc = sshd.render_etc_hosts(c)
    for h in c.hosts:
        for d in (h.bin_dir, h.site_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
        _write(h.dir / "hosts", etc)
        _write(h.sshd_config, sshd.render_sshd_config(c, h, cfg.resolved_python_bin))
        state = make_state(c.name, h.name, cfg.gpus_per_host, cfg.gpu_model)
        write_state(h.gpu_state_file, state)
        gpufaults.write_sysfs(h.sysfs_dir, state)
        _write(h.cpu_training_flag, "the fake GPUs train on the CPU (tensorflow-cpu, no NCCL)\n")
    netns.create(c)
    if cfg.hosts_in_etc_hosts:
        etc_hosts.add(c.name, c.addresses)
    sshd.start_holders(c)  # returns once every sshd listens
    _write(c.state_dir / "cluster.json", config_to_json(cfg, c.subnet))
    registry_file(c.name).write_text(f"{c.state_dir}\n")


def down(cfg: SimConfig, *, purge: bool = False) -> None:
    """Remove every namespace, link, process and /etc/hosts line of cluster ``cfg.name``.
    ``purge`` also deletes the files it wrote in the state dir (keys included)."""
    require_root()
    started = time.monotonic()
    with locked("clusters"):
        _teardown(cfg)
        if purge:
            _purge(cfg.resolved_state_dir)
    log.info("sim %s down in %.2f s", cfg.name, time.monotonic() - started)


def _teardown(cfg: SimConfig) -> None:
    state_dir = cfg.resolved_state_dir
    survivors = _stop_processes(cfg)
    netns.delete(cfg)
    etc_hosts.remove(cfg.name)
    for f in (state_dir / "cluster.json", *state_dir.glob("hosts/*/*.pid")):
        f.unlink(missing_ok=True)
    registry_file(cfg.name).unlink(missing_ok=True)
    left = netns.existing_netns(cfg.name) + netns.existing_links(cfg.name)
    if survivors or left:
        raise SimError(
            f"sim {cfg.name}: teardown left {', '.join(left) or 'no links'}; "
            f"processes {survivors or 'none'} survived SIGKILL",
            hint="look at them with `ip netns list`, `ip link` and `ps -p`; run down again",
        )


def _stop_processes(cfg: SimConfig) -> list[int]:
    """Stop every process in this cluster's namespaces: first all but the holders (which reap
    them), then the holders (reaped here when this process started them)."""
    holders: list[int] = []
    others: list[int] = []
    for ns in netns.existing_netns(cfg.name):
        host = ns.removeprefix(f"{cfg.name}-")
        holder = read_pid(cfg.resolved_state_dir / "hosts" / host / "holder.pid")
        for pid in pids_in_netns(netns.netns_path(ns)):
            (holders if pid == holder else others).append(pid)
    survivors = stop_pids(others) + stop_pids(holders)
    sshd.reap_children()
    return survivors


def _purge(state_dir: Path) -> None:
    for name in _STATE_FILES:
        (state_dir / name).unlink(missing_ok=True)
    for name in ("hosts", "bin"):
        shutil.rmtree(state_dir / name, ignore_errors=True)
    try:
        state_dir.rmdir()
    except OSError:
        log.info("kept %s: it holds files the sim did not write", state_dir)
