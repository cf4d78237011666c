"""Shared integration fixtures: ``sim_cluster``, a simulated 4-host cluster (ringtrain.sim).

The cluster gets a name of its own (``t<pid of this pytest>``), a free 10.213.X.0/24 subnet and a
state dir under pytest's tmp dir, so it never collides with a user's ``ringtrain sim up`` nor
with a pytest session running beside this one. Clusters left by killed sessions (their pytest
PID is gone) are removed first. Tests that inject a fault (``sim.set_gpus(c.config, 'gpu03',
'fail')``, ``sim.set_link``, ``sim.stop_sshd``, ``sim.rotate_host_key``, ``sim.set_versions``)
must undo it in a ``finally``: the cluster is shared by the whole session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.rank import procfs
from tests.integration import simnames

SIM_HOSTS = 4
SIM_GPUS = 4
_TEST_NAME = re.compile(r"^t(\d+)-gpu\d+$")


def sim_unavailable() -> str | None:
    """Why a sim cluster cannot be built here; None when it can."""
    if os.geteuid() != 0:
        return "the simulated cluster needs root (network namespaces); CI runs as root"
    missing = [t for t in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen") if not shutil.which(t)]
    if not Path("/usr/sbin/sshd").exists():
        missing.append("/usr/sbin/sshd")
    if missing:
        return f"missing {', '.join(missing)}: apt-get install -y iproute2 openssh-server"
    done = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return f"`ip netns` is unavailable here: {done.stderr.strip()}"
    return None


def session_cluster_name() -> str:
    return simnames.SESSION_CLUSTER


def remove_stale_test_clusters() -> None:
    """Take down sim clusters of earlier pytest sessions that died without their teardown."""
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout.strip()
    names = [e["name"] for e in json.loads(out or "[]")]
    owners = {int(m.group(1)) for n in names if (m := _TEST_NAME.match(n))}
    for pid in owners:
        alive = b"pytest" in procfs.read(f"/proc/{pid}/cmdline")
        if not alive:
            sim.down(sim.SimConfig(name=f"t{pid}"), purge=False)


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sim.SimCluster]:
    """A running 4-host sim cluster (gpu01..gpu04, 4 x H100 each) for the whole session."""
    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    remove_stale_test_clusters()
    name = session_cluster_name()
    cfg = sim.SimConfig(name=name, hosts=SIM_HOSTS, gpus_per_host=SIM_GPUS,
                        state_dir=tmp_path_factory.mktemp("sim") / name)
    cluster = sim.up(cfg)
    try:
        yield cluster
    finally:
        sim.down(cfg, purge=True)
