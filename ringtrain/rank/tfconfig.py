"""A TF-strategy rank's ``TF_CONFIG``, from the cluster the launcher passed to every rank
(``RINGTRAIN_TF_CLUSTER``, see ``ringtrain.launch.plan.tfcluster``) and this rank's number.

Standard library only, like the rest of ``ringtrain.rank``. The rank entry calls ``apply()``
before the training script runs; a ``TF_CONFIG`` the user set is never overwritten silently:
the rank stops and says so.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

from ringtrain.rank import envvars


class TfConfigError(Exception):
    """This rank cannot take its task; the message says why and what to do."""


def tf_config(cluster_text: str, rank: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` of ``rank``: the whole cluster, and this rank's task."""
    try:
        data = json.loads(cluster_text)
        kind, index = data["tasks"][rank]
        cluster = data["cluster"]
        cluster[kind][index]  # the task must be in the cluster
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise TfConfigError(f"{envvars.TF_CLUSTER} has no task for rank {rank} ({err!r}): "
                            "start TF-strategy jobs with `ringtrain launch --strategy`") from err
    return {"cluster": cluster, "task": {"type": kind, "index": index}}


def port_in_use(port: int) -> bool:
    """Whether a TCP port on this host is taken (a task could not serve on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


def apply(environ: Any = os.environ, rank: int | None = None) -> dict[str, Any] | None:
    """Set this rank's ``TF_CONFIG`` when the launcher passed a TF cluster; None otherwise."""
    text = environ.get(envvars.TF_CLUSTER)
    if not text:
        return None
    if rank is None:
        from ringtrain.rank.agent import rank_from_env  # noqa: PLC0415 - stdlib only

        rank = rank_from_env(environ)
    config = tf_config(text, rank)
    task = config["task"]
    address = config["cluster"][task["type"]][task["index"]]
    port = int(address.rpartition(":")[2])
    if port_in_use(port):
        raise TfConfigError(
            f"port {port} on {socket.gethostname()} is in use, so {task['type']}:"
            f"{task['index']} (rank {rank}) cannot serve there: pass another --tf-port, or end "
            "what listens there")
    text_config = json.dumps(config)
    if environ.get("TF_CONFIG") not in (None, "", text_config):
        raise TfConfigError("TF_CONFIG is already set in the ranks' environment; with "
                            "--strategy ringtrain sets it for every task: unset it (or drop "
                            "--env TF_CONFIG)")
    environ["TF_CONFIG"] = text_config
    return config


def main(argv: list[str]) -> int:
    """``python -m ringtrain.rank.tfconfig --taken PORT...``: the ports among these that a task
    could not serve on here, as a JSON list (the launcher asks every host before a TF job)."""
    if argv[:1] != ["--taken"] or not all(a.isdigit() for a in argv[1:]):
        sys.stderr.write("usage: python -m ringtrain.rank.tfconfig --taken PORT...\n")
        return 2
    sys.stdout.write(json.dumps([int(p) for p in argv[1:] if port_in_use(int(p))]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
