"""A simulated multi-host GPU cluster on one machine, for tests and demos (needs root).

N hosts, each a network namespace with its own hostname, sshd, host key,
/etc/hosts and a fake ``nvidia-smi``, on a private subnet joined by a bridge in the root
namespace. ``up`` writes an ssh config, known_hosts, a client key and an Open MPI hostfile into
the state dir; ``ssh -F <ssh_config> gpu01`` and ``mpirun --mca plm_rsh_agent "ssh -F ..."`` reach
the hosts. Traffic stays on loopback and the simulated subnet.

Host names: ``gpu01..gpuNN`` on the default cluster ``rt``, ``<name>-gpu01..`` on any other
(``ringtrain sim up --name t2`` gives ``t2-gpu01``), so two clusters up at once never share a
name in /etc/hosts, where the first line would win for both (``config.host_name``).

::

    from ringtrain.sim import SimConfig, up, down, set_gpus
    c = up(SimConfig(name="rt", hosts=4))
    set_gpus(c.config, "gpu03", "fail")
    down(c.config)

Modules: config (values), netns (network), sshd (keys, configs, processes), holder (a host's
first process: hostname, mounts, sshd, reaping), etc_hosts (name resolution in the root
namespace), gpus (fake GPU state and versions), fake_nvidia_smi (the script), proc (commands,
PIDs, namespaces), cluster (up/down), ops (status and fault injection).

Measured on a loaded 2-core machine: ``up`` of 4 hosts 0.15-0.5 s, ``up`` again (no-op)
0.01 s, ``down`` 0.2 s, one ``ssh -F ... gpu01 true`` 0.2-0.3 s. Each host costs a Python
holder (about 12 MB RSS) and an sshd (about 9 MB).
"""

from ringtrain.sim.cluster import cluster, down, load, up
from ringtrain.sim.config import SimCluster, SimConfig, SimHost
from ringtrain.sim.gpufaults import Fault
from ringtrain.sim.ops import (
    HostStatus,
    SimStatus,
    clear_versions,
    declare_cpu_training,
    gpu_fault,
    host_processes,
    rotate_host_key,
    set_gpus,
    set_link,
    set_versions,
    start_sshd,
    status,
    stop_sshd,
)

__all__ = [
    "Fault",
    "HostStatus",
    "SimCluster",
    "SimConfig",
    "SimHost",
    "SimStatus",
    "clear_versions",
    "cluster",
    "declare_cpu_training",
    "down",
    "gpu_fault",
    "host_processes",
    "load",
    "rotate_host_key",
    "set_gpus",
    "set_link",
    "set_versions",
    "start_sshd",
    "status",
    "stop_sshd",
    "up",
]
