"""The pre-flight's port check for a TensorFlow strategy job: every task's port free on its host,
asked of each host through the Remote seam (``python -I -m ringtrain.rank.tfconfig --taken``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence

from ringtrain.errors import AllocationError
from ringtrain.hostfile import Host
from ringtrain.rank import isolated
from ringtrain.remote import Remote

log = logging.getLogger(__name__)
PORT_CHECK_TIMEOUT_S = 30.0


def check_ports(remote: Remote, hosts: Sequence[Host], ports: Mapping[str, Iterable[int]],
                tf_port: int, python: str) -> list[str]:
    """Before a TF job: every task's port (``ports``: host -> the ports its tasks take) must be
    free on its host (TensorFlow's servers bind them). Refuses the launch, naming each taken
    ``host:port``; returns what could not be checked (a host that did not answer: its tasks
    then say so themselves at start)."""
    commands = [(h, isolated.module_argv(python, "ringtrain.rank.tfconfig", "--taken",
                                         *map(str, sorted(ports[h.name]))))
                for h in hosts if h.name in ports]
    answers = remote.run_each(commands, PORT_CHECK_TIMEOUT_S)
    unchecked = [f"{host} ({r.error or r.stderr.strip()[-200:] or 'no answer'})"
                 for host, r in answers.failed.items()]
    taken = []
    for host, answer in answers.succeeded.items():
        try:
            taken += [f"{host}:{p}" for p in json.loads(answer.stdout)]
        except ValueError as err:
            unchecked.append(f"{host} ({err})")
    if taken:
        raise AllocationError(
            f"TensorFlow task ports in use: {', '.join(taken)}",
            f"pass --tf-port with another base (the tasks of a host take --tf-port "
            f"{tf_port} and the next ones), or end what listens there")
    if unchecked:
        log.warning("could not check the TF task ports on %s", "; ".join(unchecked))
    return unchecked
