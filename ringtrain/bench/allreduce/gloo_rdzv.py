"""Horovod-over-Gloo under mpirun: the launcher runs Horovod's rendezvous server, ranks find it.

Horovod 0.28.1 runs Gloo collectives only with the Gloo *controller*: with
``HOROVOD_CPU_OPERATIONS=gloo`` alone (MPI controller) the process set's Gloo context is never
built and the first all-reduce segfaults in ``GlooAllreduce::Execute`` (seen here). So, like
``horovodrun --gloo``, the launcher serves Horovod's HTTP rendezvous (bound to one address:
loopback, or the sim bridge) and each rank derives ``HOROVOD_RANK``/``SIZE``/``LOCAL_*``/
``CROSS_*``/``HOSTNAME`` from Open MPI's variables before ``hvd.init()``
(``rank_env_from_ompi``). mpirun still starts the ranks and mpi4py still gives the barrier.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from ringtrain.rank import envvars

NODE = "node{}"


def plan_hosts(np: int, ranks_per_host: int) -> str:
    """Horovod's ``-H`` spelling of the plan: ``node0:2,node1:2``."""
    hosts = -(-np // ranks_per_host)
    return ",".join(f"{NODE.format(i)}:{ranks_per_host}" for i in range(hosts))


@contextlib.contextmanager
def rendezvous(bind: str, np: int, ranks_per_host: int, iface: str
               ) -> Iterator[dict[str, str]]:
    """Serve Horovod's rendezvous on ``bind`` for ``np`` ranks; yields the env the ranks need."""
    from horovod.runner.common.util.hosts import (
        get_host_assignments,
        parse_hosts,
    )
    from horovod.runner.http.http_server import (
        RendezvousHandler,
        RendezvousHTTPServer,
    )

    server = RendezvousHTTPServer((bind, 0), RendezvousHandler, 0)
    server.init(get_host_assignments(parse_hosts(plan_hosts(np, ranks_per_host)), np))
    thread = threading.Thread(target=server.serve_forever, name="gloo-rdzv", daemon=True)
    thread.start()
    try:
        yield {"HOROVOD_GLOO_RENDEZVOUS_ADDR": bind,
               "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_address[1]),
               "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
               "HOROVOD_GLOO_IFACE": iface, envvars.GLOO_PER_HOST: str(ranks_per_host)}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def rank_env_from_ompi(env: Mapping[str, str]) -> dict[str, str]:
    """Horovod's per-rank variables from Open MPI's (ranks are placed host by host)."""
    rank, size = int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
    per_host = int(env.get(envvars.GLOO_PER_HOST, env["OMPI_COMM_WORLD_LOCAL_SIZE"]))
    cross = rank // per_host
    return {"HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
            "HOROVOD_LOCAL_RANK": str(rank % per_host), "HOROVOD_LOCAL_SIZE": str(per_host),
            "HOROVOD_CROSS_RANK": str(cross), "HOROVOD_CROSS_SIZE": str(-(-size // per_host)),
            "HOROVOD_HOSTNAME": NODE.format(cross)}
