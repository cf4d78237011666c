"""``ringtrain sim``: a simulated GPU cluster on this machine (network namespaces, needs root)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ringtrain import sim
from ringtrain.cli.plain import cell
from ringtrain.sim import gpufaults
from ringtrain.sim.config import DEFAULT_MODEL, DEFAULT_NAME
from ringtrain.sim.gpus import parse_count
from ringtrain.sim.hdfsserver import start_hdfs_server, stop_hdfs_server
from ringtrain.sim.s3server import start_s3_server, stop_s3_server
from ringtrain.sim.slurm import SlurmSimConfig, slurm_down, slurm_up
from ringtrain.sim.slurm import load as load_slurm

_EPILOG = """\b
Examples:
  sudo ringtrain sim up                      4 hosts gpu01..gpu04, 4 x H100 each
  sudo ringtrain sim up --hosts 8 --gpus 8
  sudo ringtrain sim up --s3 --hdfs          with an S3 server and an HDFS the hosts reach
  ringtrain sim status
  sudo ringtrain sim set-gpus gpu03 2        gpu03 now reports 2 GPUs
  sudo ringtrain sim set-gpus gpu03 fail     nvidia-smi on gpu03 fails (driver message, exit 9)
  sudo ringtrain sim link gpu02 down         gpu02 drops off the network
  sudo ringtrain sim down
"""

_name = click.option("--name", default=DEFAULT_NAME, show_default=True,
                     help="Cluster name; namespaces and links are prefixed with it.")
_state_dir = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                          help="Where keys and configs go (default: ./.sim/NAME, or where the "
                               "running cluster NAME keeps them).")


def _cfg(name: str, state_dir: Path | None) -> sim.SimConfig:
    return sim.SimConfig(name=name, state_dir=state_dir)


@click.group("sim", epilog=_EPILOG)
def command() -> None:
    """Simulated multi-host GPU cluster: hosts in network namespaces with sshd and a fake
    nvidia-smi, on a private subnet. Traffic stays on this machine."""


@command.command("up", epilog=_EPILOG)
@click.option("--hosts", default=4, show_default=True, help="Number of hosts (gpu01..gpuNN).")
@click.option("--gpus", default=4, show_default=True, help="GPUs per host.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="GPU model name.")
@click.option("--subnet", help="Private IPv4 subnet (default: a free 10.213.X.0/24).")
@click.option("--no-etc-hosts", is_flag=True,
              help="Do not add the host names to /etc/hosts (ssh -F and mpirun with "
                   "plm_rsh_agent 'ssh -F' work without them).")
@click.option("--slurm", is_flag=True,
              help="Also start a Slurm cluster (munge, slurmctld, one slurmd per host).")
@click.option("--s3", is_flag=True,
              help="Also start an S3 server (SeaweedFS) on the cluster's bridge address.")
@click.option("--hdfs", is_flag=True,
              help="Also start an HDFS (Hadoop's MiniDFSCluster: a NameNode and a DataNode in "
                   "one JVM; needs Java 17 and Maven) on the cluster's bridge address.")
@_name
@_state_dir
def up_cmd(hosts: int, gpus: int, model: str, subnet: str | None, no_etc_hosts: bool,
           slurm: bool, s3: bool, hdfs: bool, name: str, state_dir: Path | None) -> None:
    """Build the cluster (idempotent: a healthy one is left alone, a damaged one repaired)."""
    cfg = sim.SimConfig(name=name, hosts=hosts, subnet=subnet, state_dir=state_dir,
                        gpus_per_host=gpus, gpu_model=model, hosts_in_etc_hosts=not no_etc_hosts)
    c = sim.up(cfg)
    if s3:
        # Ranks run inside the hosts' network namespaces: 127.0.0.1 there is their own
        # loopback, so the server listens on the bridge address every host can reach.
        server = start_s3_server(c.state_dir / "s3", ip=c.bridge_address)
        exports = " ".join(f"{k}={v}" for k, v in server.file_env().items())
        click.echo(f"s3 {name}: {server.endpoint_url}, bucket {server.bucket} "
                   f"(credentials in a 0600 file); use it with:\n  export {exports}\n"
                   f"  ringtrain launch --checkpoint {server.url('my-run')} ...")
    if hdfs:
        # The NameNode and DataNodes on the bridge address too: clients in the hosts' namespaces
        # are sent to the DataNodes' registered address, which is that one (sim/minihdfs.py).
        namenode = start_hdfs_server(c.state_dir / "hdfs", ip=c.bridge_address)
        click.echo(f"hdfs {name}: {namenode.url}/ (a NameNode and a DataNode; the data lasts "
                   f"until `sim down`); use it with:\n"
                   f"  ringtrain launch --checkpoint {namenode.url}/my-run ...")
    if slurm:
        s = slurm_up(SlurmSimConfig(name=name, nodes=hosts, gpus_per_node=gpus))
        click.echo(f"slurm {name}: {len(s.nodes)} nodes ({', '.join(s.nodes)}); "
                   f"use it with: export SLURM_CONF={s.slurm_conf}")
    click.echo(f"sim {c.name}: {len(c.hosts)} hosts on {c.subnet} "
               f"({', '.join(f'{h.name}={h.address}' for h in c.hosts)})")
    click.echo(f"  hostfile    {c.hostfile}")
    click.echo(f"  ssh config  {c.ssh_config}")
    click.echo(f"  known_hosts {c.known_hosts}")
    click.echo(f"  try:  ssh -F {c.ssh_config} {c.names[0]} nvidia-smi -L")
    click.echo(f"  next: ringtrain check --hosts {c.hostfile} --ssh-config {c.ssh_config}")


@command.command("down")
@click.option("--purge", is_flag=True, help="Also delete the state dir's files (keys included).")
@_name
@_state_dir
def down_cmd(purge: bool, name: str, state_dir: Path | None) -> None:
    """Remove every namespace, link, process and /etc/hosts line of the cluster (and its Slurm
    cluster, S3 and HDFS servers, when `up --slurm`, `--s3`, `--hdfs` started them)."""
    cfg = _cfg(name, state_dir)
    if stop_s3_server(cfg.resolved_state_dir / "s3"):
        click.echo(f"s3 {name}: stopped")
    if stop_hdfs_server(cfg.resolved_state_dir / "hdfs"):
        click.echo(f"hdfs {name}: stopped")
    sim.down(cfg, purge=purge)
    if load_slurm(SlurmSimConfig(name=name)) is not None:
        slurm_down(SlurmSimConfig(name=name))
        click.echo(f"slurm {name}: down")
    click.echo(f"sim {name}: down")


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_name
@_state_dir
def status_cmd(as_json: bool, name: str, state_dir: Path | None) -> None:
    """Show each host: address, link, sshd, GPUs, fake versions."""
    st = sim.status(_cfg(name, state_dir))
    if as_json:
        data = asdict(st)
        data["state_dir"] = str(st.state_dir)
        click.echo(json.dumps(data, indent=2))
        return
    if not st.up:
        extra = f" (leftovers: {', '.join(st.leftovers)}; run `ringtrain sim down`)" \
            if st.leftovers else ""
        click.echo(f"sim {name}: down{extra}")
        return
    table = Table(title=cell(f"sim {name} on {st.subnet} ({st.state_dir})"))
    for col in ("host", "address", "link", "sshd", "GPUs", "model", "driver", "fake versions"):
        table.add_column(col)
    for h in st.hosts:
        table.add_row(  # from the sim's state file: text, never markup (plain.py)
            cell(h.name), cell(h.address),
            "up" if h.link_up else cell("down", "red"),
            str(h.sshd_pid) if h.sshd_pid else cell("stopped", "red"),
            str(h.gpus), cell(h.gpu_model),
            "ok" if h.gpu_mode == "ok" else cell(h.gpu_mode, "red"),
            cell(" ".join(f"{k}={v}" for k, v in h.versions)),
        )
    Console().print(table)


@command.command("set-gpus")
@click.argument("host")
@click.argument("count", metavar="COUNT|fail|ok")
@click.option("--model", help="Change the GPU model too.")
@_name
@_state_dir
def set_gpus_cmd(host: str, count: str, model: str | None, name: str,
                 state_dir: Path | None) -> None:
    """Set HOST's GPU count, make its nvidia-smi fail, or make it work again."""
    sim.set_gpus(_cfg(name, state_dir), host, parse_count(count), model)
    click.echo(f"{host}: {count}" + (f" x {model}" if model else ""))


@command.command("gpu-fault", epilog="""\b
Examples:
  ringtrain sim gpu-fault gpu03 --gpu 1 --pcie-width 8
  ringtrain sim gpu-fault gpu02 --gpu 0 --xid 79 --ecc 2
  ringtrain sim gpu-fault gpu04 --ib-port-down
  ringtrain sim gpu-fault gpu03 --clear
then: ringtrain check --hosts <sim hostfile> --doctor""")
@click.argument("host")
@click.option("--gpu", type=click.IntRange(min=0), default=0, show_default=True,
              help="The GPU (nvidia-smi index) the GPU faults are made on.")
@click.option("--pcie-width", type=click.IntRange(1, 32), help="PCIe link width now (max 16).")
@click.option("--pcie-gen", type=click.IntRange(1, 6),
              help="PCIe generation now (max 4), with the GPU busy so it is judged.")
@click.option("--slowdown", type=click.Choice(sorted(gpufaults.SLOWDOWNS)),
              help="A clocks event reason that holds the clocks down.")
@click.option("--ecc", type=click.IntRange(min=0), help="Uncorrected volatile ECC errors.")
@click.option("--retired-pending", is_flag=True, help="Retired pages pending.")
@click.option("--remap-pending", is_flag=True, help="Row remapping pending.")
@click.option("--remap-failed", is_flag=True, help="Row remapping failed.")
@click.option("--reset-required", is_flag=True, help="The driver asks for a GPU reset.")
@click.option("--drain", is_flag=True, help="The driver recommends drain and reset.")
@click.option("--nvlink-down", metavar="LINKS|all",
              help="NVLink links inactive on the GPU (the host's GPUs get 18 links each).")
@click.option("--xid", type=click.IntRange(1, 999), help="An Xid line in the kernel log.")
@click.option("--replays", type=click.IntRange(min=0), help="PCIe replays since reset.")
@click.option("--nic-far", is_flag=True,
              help="The GPU reaches the job's NIC across the CPU interconnect (topo -m SYS).")
@click.option("--ib-port-down", is_flag=True, help="The RDMA port behind eth0 is DOWN.")
@click.option("--ib-rate", type=click.IntRange(min=1), metavar="GBPS",
              help="The RDMA port's rate.")
@click.option("--link-downed", type=click.IntRange(min=0), help="The port's link_downed count.")
@click.option("--eth-speed", type=click.IntRange(min=1), metavar="MBPS",
              help="eth0's link speed (others: 10000).")
@click.option("--clear", is_flag=True, help="Every fault on the host cleared.")
@_name
@_state_dir
def gpu_fault_cmd(host: str, gpu: int, clear: bool, name: str, state_dir: Path | None,
                  **faults: object) -> None:
    """Make a GPU or NIC fault on HOST that `ringtrain check --doctor` should name: the fake
    nvidia-smi, dmesg and sysfs there show it in the real tools' formats."""
    if faults.get("nvlink_down") not in (None, "all") and not all(
            x.strip().isdigit() for x in str(faults["nvlink_down"]).split(",")):
        raise click.BadParameter("links are numbers like 3,5 or 'all'", param_hint="--nvlink-down")
    fault = sim.Fault(**faults)  # type: ignore[arg-type]
    if clear == (not fault.empty()):
        raise click.UsageError("give faults to make, or --clear (not both)")
    sim.gpu_fault(_cfg(name, state_dir), host, gpu, None if clear else fault)
    click.echo(f"{host}: " + ("faults cleared" if clear else f"GPU {gpu}: " + ", ".join(
        f"{k.replace('_', '-')}={v}" for k, v in faults.items() if v not in (None, False))))


@command.command("link")
@click.argument("host")
@click.argument("state", type=click.Choice(["up", "down"]))
@_name
@_state_dir
def link_cmd(host: str, state: str, name: str, state_dir: Path | None) -> None:
    """Take HOST's network link down or bring it back up."""
    sim.set_link(_cfg(name, state_dir), host, state == "up")
    click.echo(f"{host}: link {state}")
