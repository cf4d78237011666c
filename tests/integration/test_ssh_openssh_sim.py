"""The probe and mpirun reach the hosts the same way: OpenSSH's reading of the ssh config.

The user's config holds nothing but an ``Include``; the included file names the identity, the
known_hosts, the user and, for the second host, a bastion: ``ProxyJump`` through the first
host to a HostName that only the hosts themselves can resolve (``<host>.inside``, added to the
sim hosts' own /etc/hosts). paramiko's reader ignored ``Include`` and refused ``ProxyJump``; the
probe now asks ``ssh -G`` and goes through the bastion as ``ssh -J`` would, and mpirun's ssh,
given the same config, starts the ranks there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.simnames import G1, G2

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

WHERE = """\
import socket
from mpi4py import MPI
c = MPI.COMM_WORLD
print("RANK", c.rank, socket.gethostname(), c.allreduce(1), flush=True)
"""


@pytest.fixture
def inside_name(sim_cluster: sim.SimCluster) -> Iterator[str]:
    """``<G2>.inside``: a name for the second host that only the first host resolves."""
    hosts_file = sim_cluster.host(G1).dir / "hosts"
    before = hosts_file.read_text()
    name = f"{G2}.inside"
    with open(hosts_file, "a") as fh:  # in place: the file is bind-mounted as /etc/hosts
        fh.write(f"{sim_cluster.addresses[G2]}\t{name}\n")
    try:
        yield name
    finally:
        with open(hosts_file, "r+") as fh:
            fh.write(before)
            fh.truncate()


def _config(tmp_path: Path, cluster: sim.SimCluster, inside: str) -> Path:
    included = tmp_path / "conf.d" / "cluster.conf"
    included.parent.mkdir()
    included.write_text(
        f"Host {G2}\n    HostName {inside}\n    ProxyJump {G1}\n\n"
        f"Host {G1}\n    HostName {cluster.addresses[G1]}\n\n"
        f"Host {G1} {G2}\n    User {cluster.user}\n    IdentityFile {cluster.identity_file}\n"
        f"    IdentitiesOnly yes\n    UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
        "    GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n    ConnectTimeout 5\n")
    # keys under the names OpenSSH looks up: each HostName (the bastion's address, the name
    # only the bastion resolves), not the aliases
    keys = {names.split(",")[0]: key for names, key in (
        line.split(" ", 1) for line in cluster.known_hosts.read_text().splitlines())}
    (tmp_path / "known_hosts").write_text(
        f"{cluster.addresses[G1]} {keys[G1]}\n{inside} {keys[G2]}\n")
    main = tmp_path / "ssh_config"
    main.write_text(f"Include {included.parent}/*.conf\n")
    return main


def test_probe_and_mpirun_follow_an_included_config_through_a_bastion(
        sim_cluster: sim.SimCluster, inside_name: str, tmp_path: Path) -> None:
    config = _config(tmp_path, sim_cluster, inside_name)
    resolved = subprocess.run(["ssh", "-F", str(config), "-G", G2], capture_output=True,
                              text=True, check=True).stdout
    assert f"proxyjump {G1}\n" in resolved and f"hostname {inside_name}\n" in resolved
    checked = subprocess.run(
        [sys.executable, "-m", "ringtrain", "check", "-H", f"{G1}:1,{G2}:1", "--ssh-config",
         str(config), "--json", "--timeout", "30"],
        capture_output=True, text=True, timeout=120, check=False)
    data = json.loads(checked.stdout)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert [h["status"] for h in data["hosts"]] == ["ok", "ok"], data["hosts"]
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    ran = subprocess.run(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "-H", f"{G1}:1,{G2}:1", "--ssh-config", str(config), str(script)],
        capture_output=True, text=True, timeout=240, check=False)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    ranks = sorted(line.split("RANK ", 1)[1].split() for line in ran.stdout.splitlines()
                   if "RANK " in line)
    assert ranks == [["0", G1, "2"], ["1", G2, "2"]]


def test_a_bastion_that_refuses_is_named(sim_cluster: sim.SimCluster, inside_name: str,
                                         tmp_path: Path) -> None:
    config = _config(tmp_path, sim_cluster, inside_name)
    sim.stop_sshd(sim_cluster.config, G1)
    try:
        checked = subprocess.run(
            [sys.executable, "-m", "ringtrain", "check", "-H", f"{G2}:1", "--ssh-config",
             str(config), "--json", "--timeout", "20"],
            capture_output=True, text=True, timeout=120, check=False)
    finally:
        sim.start_sshd(sim_cluster.config, G1)
    (row,) = json.loads(checked.stdout)["hosts"]
    assert row["status"] == "failed" and checked.returncode == 4
    assert f"jump host {G1}: connection refused" in row["problems"][0], row
