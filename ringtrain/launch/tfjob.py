"""The launcher's part in a TF parameter-server job while it runs (the cluster itself is
``tfcluster``, pure)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from ringtrain.errors import AllocationError
from ringtrain.hostfile import Allocation
from ringtrain.launch import tfcluster
from ringtrain.launch.control import Snapshot
from ringtrain.remote import Remote
from ringtrain.spec import LaunchSpec

log = logging.getLogger(__name__)
PORT_CHECK_TIMEOUT_S = 30.0


def check_ports(remote: Remote, alloc: Allocation, spec: LaunchSpec, python: str) -> list[str]:
    """Before a TF job: every task's port must be free on its host (TensorFlow's servers bind
    them). Refuses the launch, naming each taken ``host:port``; returns what could not be
    checked (a host that did not answer: its tasks then say so themselves at start)."""
    ports = tfcluster.ports_by_host(alloc, spec)
    commands = [(h, [python, "-m", "ringtrain.rank.tfconfig", "--taken",
                     *map(str, sorted(ports[h.name]))]) for h in alloc.hosts if h.name in ports]
    answers = remote.run_each(commands, PORT_CHECK_TIMEOUT_S)
    taken, unchecked = [], []
    for host, answer in answers.items():
        try:
            if answer.exit_code != 0:
                raise ValueError(answer.error or answer.stderr.strip()[-200:])
            taken += [f"{host}:{p}" for p in json.loads(answer.stdout)]
        except ValueError as err:
            unchecked.append(f"{host} ({err or 'no answer'})")
    if taken:
        raise AllocationError(
            f"TensorFlow task ports in use: {', '.join(taken)}",
            f"pass --tf-port with another base (the tasks of a host take --tf-port "
            f"{spec.tf_port} and the next ones), or end what listens there")
    if unchecked:
        log.warning("could not check the TF task ports on %s", "; ".join(unchecked))
    return unchecked


class ServerFinisher:
    """tf-ps: ps and worker tasks serve until told otherwise (``server.join()``), so the job
    ends when the chief's does. Once the chief said "done" and its process is gone (or 10 s
    after "done", should it hang in finalisation), every rank is told "finish": its agent says
    "done" and exits 0, and mpirun ends as for any job that succeeded."""

    GRACE_S = 10.0

    def __init__(self, broadcast: Callable[[str], None], note: Callable[[str], None]) -> None:
        self.broadcast = broadcast
        self.note = note
        self.sent_at: float | None = None

    def tick(self, snap: Snapshot) -> None:
        chief = next((r for r in snap.ranks if r.rank == tfcluster.CHIEF_RANK), None)
        if chief is None or chief.done_at is None:
            return
        if self.sent_at is None and (not chief.connected
                                     or snap.now - chief.done_at > self.GRACE_S):
            self.note("the chief finished: ending the ps and worker tasks")
            self.sent_at = snap.now
        if self.sent_at is not None and snap.now - self.sent_at < 30:
            self.broadcast("finish")  # again each tick: a rank may miss one send
