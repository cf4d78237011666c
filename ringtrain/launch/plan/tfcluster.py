"""The TensorFlow cluster of a TF-strategy launch, from the allocation. Pure.

* ``--strategy tf-multiworker``: every rank is a ``worker`` task (worker 0 is TensorFlow's
  chief), rank r runs ``worker:r``.
* ``--strategy tf-ps --ps N``: every slot of the allocation is a ``worker``; one ``chief`` (the
  coordinator, which runs the training loop) and N ``ps`` tasks come on top of them
  (``with_tasks``): the chief on the first host, ps i on host i mod H, so parameter servers are
  spread over the hosts. On each host the chief comes first, then the ps tasks, then the
  workers, so the chief is rank 0. With ``--ps-hosts own`` the ps tasks go instead to the
  inventory's hosts that run no worker (round robin), after the workers' hosts, so each has a
  link of its own, as the cost model's parameter servers do.

A host's tasks listen on ``tf_port``, ``tf_port + 1``, ... in the order of their ranks there,
at the host's address (``Host.address``: Slurm's NodeAddr where it is not the node name) or
its name. Two hosts at one address are refused: their tasks would take the same ports.
The launcher passes the whole cluster to every rank in one variable; the rank entry turns it
into that rank's ``TF_CONFIG`` (``ringtrain.rank.tfconfig``), the variable TensorFlow's cluster
resolver reads, as tf-operator and TonY set it. Every task runs the user's script, as in
TensorFlow's tutorials, where the script itself starts a ``tf.distribute.Server`` on ps and
worker tasks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ringtrain.errors import AllocationError
from ringtrain.hostfile import Allocation, Host, with_extra_slots
from ringtrain.spec import LaunchSpec, Strategy

CHIEF_RANK = 0  # tf-ps: the coordinator; the job is over when its script returns


def _extras(slots: dict[str, int], ps: int, own: bool) -> dict[str, list[str]]:
    """tf-ps: the tasks each host runs beyond its workers, in their local order. ``slots``:
    every host's ranks, in order. Shared: the chief first on the first host, ps i on host
    i mod H. Own: the chief on the first host; the hosts after the workers' hold only ps."""
    hosts = list(slots)
    extra: dict[str, list[str]] = {h: [] for h in hosts}
    extra[hosts[0]].append("chief")
    if not own:
        for i in range(ps):
            extra[hosts[i % len(hosts)]].append("ps")
        return extra
    workers = sum(slots.values()) - 1 - ps
    for host in hosts:
        room = slots[host] - len(extra[host])
        if workers <= 0:
            extra[host] += ["ps"] * room
        workers -= room
    return extra


def is_tf(spec: LaunchSpec) -> bool:
    return spec.strategy is not Strategy.HOROVOD


def has_servers(spec: LaunchSpec) -> bool:
    """Whether tasks serve until told to end (tf-ps: ps and workers), not run to the end."""
    return spec.strategy is Strategy.TF_PS


def with_tasks(alloc: Allocation, spec: LaunchSpec, candidates: Sequence[Host] = ()) -> Allocation:
    """The allocation the job runs: under tf-ps, the workers' plus the chief and ps tasks; with
    ``--ps-hosts own`` the ps tasks go to the ``candidates`` hosts that got no worker, round
    robin, appended after the workers' hosts."""
    if spec.strategy is not Strategy.TF_PS:
        return alloc
    if spec.ps_hosts != "own":
        extra = _extras({h.name: h.slots for h in alloc.hosts}, spec.ps, own=False)
        return with_extra_slots(alloc, {h: len(tasks) for h, tasks in extra.items()})
    used = {h.name for h in alloc.hosts}
    spare = [h for h in candidates if h.name not in used and h.slots > 0]
    if not spare:
        raise AllocationError(
            "--ps-hosts own: every host runs workers, so none is left for the parameter servers",
            "pass a smaller -np, add hosts to the inventory, or use --ps-hosts shared")
    count: dict[str, int] = {}
    for i in range(spec.ps):
        name = spare[i % len(spare)].name
        count[name] = count.get(name, 0) + 1
    ps_hosts = tuple(h.with_slots(count[h.name]) for h in spare if h.name in count)
    return with_extra_slots(alloc, {alloc.hosts[0].name: 1}, appended=ps_hosts)


def tf_cluster(alloc: Allocation, strategy: Strategy, tf_port: int,
               ps: int = 0, own: bool = False) -> dict[str, Any]:
    """``{"cluster": {"worker": ["host:port", ...], ...}, "tasks": [["worker", 0], ...]}``:
    the cluster spec, and each rank's task in rank order. Under tf-ps ``alloc`` is the one
    ``with_tasks`` returned."""
    if strategy is Strategy.HOROVOD:
        raise ValueError("no TensorFlow cluster for strategy horovod")
    by_host = alloc.ranks_by_host()
    reach = _addresses(alloc, by_host)
    slots = {h: len(ranks) for h, ranks in by_host.items()}
    extra = (_extras(slots, ps, own) if strategy is Strategy.TF_PS
             else {h: [] for h in by_host})
    roles: dict[int, tuple[str, str]] = {}  # rank -> (type, address)
    for host, ranks in by_host.items():
        kinds = extra[host] + ["worker"] * (len(ranks) - len(extra[host]))
        for local, (rank, kind) in enumerate(zip(ranks, kinds, strict=True)):
            roles[rank] = (kind, f"{reach[host]}:{tf_port + local}")
    cluster: dict[str, list[str]] = {}
    tasks = []
    for rank in range(alloc.np):
        kind, address = roles[rank]
        tasks.append([kind, len(cluster.setdefault(kind, []))])
        cluster[kind].append(address)
    order = ("chief", "worker", "ps")
    return {"cluster": {k: cluster[k] for k in order if k in cluster}, "tasks": tasks}


def _addresses(alloc: Allocation, by_host: dict[str, tuple[int, ...]]) -> dict[str, str]:
    reach = {h.name: h.address or h.name for h in alloc.hosts}
    seen: dict[str, str] = {}
    for name in (h for h, ranks in by_host.items() if ranks):
        address = reach[name]
        other = seen.setdefault(address, name)
        if other != name:
            raise AllocationError(
                f"hosts {other} and {name} are both at {address}, so their TensorFlow tasks "
                f"would listen on the same ports",
                "run the job on one of them (-np, or a smaller allocation), or give the hosts "
                "addresses of their own (Slurm's NodeAddr)")
    return reach


def ports_by_host(alloc: Allocation, spec: LaunchSpec) -> dict[str, list[int]]:
    """The TCP ports each host's tasks listen on (``alloc`` as ``with_tasks`` returned it)."""
    return {host: [spec.tf_port + local for local in range(len(ranks))]
            for host, ranks in alloc.ranks_by_host().items() if ranks}


def cluster_for(alloc: Allocation, spec: LaunchSpec) -> dict[str, Any]:
    return tf_cluster(alloc, spec.strategy, spec.tf_port, spec.ps, spec.ps_hosts == "own")


def task_name(alloc: Allocation, spec: LaunchSpec, rank: int) -> str | None:
    """A TF strategy's rank's task as its TF_CONFIG names it (``ps:1``); None for Horovod."""
    if not is_tf(spec):
        return None
    tasks = cluster_for(alloc, spec)["tasks"]
    if not 0 <= rank < len(tasks):
        return None
    kind, index = tasks[rank]
    return f"{kind}:{index}"


def encode(cluster: dict[str, Any]) -> str:
    return json.dumps(cluster, separators=(",", ":"))


def describe(cluster: dict[str, Any], limit: int = 16) -> list[str]:
    """Dry-run lines: each rank's task, its address and the TF_CONFIG it gets."""
    out = []
    tasks = cluster["tasks"]
    for rank, (kind, index) in enumerate(tasks[:limit]):
        task = json.dumps({"type": kind, "index": index})
        out.append(f"    rank {rank}: {kind}:{index} at {cluster['cluster'][kind][index]}"
                   f"   TF_CONFIG task {task}")
    if len(tasks) > limit:
        out.append(f"    ... {len(tasks) - limit} more ranks, in the same pattern")
    out.append(f"    cluster (the same in every TF_CONFIG): {json.dumps(cluster['cluster'])}")
    return out
