"""The TensorFlow cluster of a TF-strategy launch, from the allocation. Pure.

``--strategy tf-multiworker``: every rank is a ``worker`` task (worker 0 is TensorFlow's chief),
in rank order, so rank r runs task ``worker:r``. A host's tasks listen on ``tf_port``,
``tf_port + 1``, ... in the order of their ranks on that host. The launcher passes the whole
cluster to every rank in one variable (``RINGTRAIN_TF_CLUSTER``); the rank entry turns it into
that rank's ``TF_CONFIG`` (``ringtrain.rank.tfconfig``), the variable TensorFlow's cluster
resolver reads, as tf-operator and TonY set it.
"""

from __future__ import annotations

import json
from typing import Any

from ringtrain.hostfile import Allocation
from ringtrain.spec import Strategy


def tf_cluster(alloc: Allocation, strategy: Strategy, tf_port: int) -> dict[str, Any]:
    """``{"cluster": {"worker": ["host:port", ...]}, "tasks": [["worker", 0], ...]}``: the
    cluster spec, and each rank's task in rank order."""
    if strategy is not Strategy.TF_MULTIWORKER:
        raise ValueError(f"no TensorFlow cluster for strategy {strategy.value}")
    address: dict[int, str] = {}
    for host, ranks in alloc.ranks_by_host().items():
        for local, rank in enumerate(ranks):
            address[rank] = f"{host}:{tf_port + local}"
    workers = [address[r] for r in range(alloc.np)]
    return {"cluster": {"worker": workers}, "tasks": [["worker", r] for r in range(alloc.np)]}


def encode(cluster: dict[str, Any]) -> str:
    return json.dumps(cluster, separators=(",", ":"))


def describe(cluster: dict[str, Any], limit: int = 16) -> list[str]:
    """Dry-run lines: each rank's task, its address and the TF_CONFIG it gets."""
    out = []
    tasks = cluster["tasks"]
    for rank, (kind, index) in enumerate(tasks[:limit]):
        config = {"cluster": cluster["cluster"], "task": {"type": kind, "index": index}}
        out.append(f"    rank {rank}: {kind}:{index} at {cluster['cluster'][kind][index]}"
                   f"   TF_CONFIG task {json.dumps(config['task'])}")
    if len(tasks) > limit:
        out.append(f"    ... {len(tasks) - limit} more ranks, in the same pattern")
    out.append(f"    cluster (the same in every TF_CONFIG): {json.dumps(cluster['cluster'])}")
    return out
