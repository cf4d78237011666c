"""What runs in horovodrun's place under ``--elastic``: horovodrun itself (Horovod 0.28.1's
command line, elastic driver, rendezvous and workers, unchanged) with one rule of its driver
changed. ``python -m ringtrain.hvd_driver ARGS`` takes exactly horovodrun's arguments.

Horovod's driver blacklists the host of every worker that failed in a round
(``WorkerStateRegistry._on_workers_recorded``). When one process of a healthy host dies (a
rank killed, a crash), that takes every other rank of the host with it, and on one host (an
8-GPU server, ``-H localhost:8``) it is every host: the first kill ends the job.

The rule here: a failed worker's host is blacklisted only when none of that host's workers
said they were ready in the same round, so the host itself is gone or failing. When one of them
did, the host is alive and only that process died: its slot is freed, so the driver starts a
new worker in it in the same round (``ElasticDriver._update_host_assignments`` starts every
slot not already held) and the world keeps its size; the new process takes the state from the
survivors' memory commit. A slot that fails ``MAX_SLOT_FAILURES`` times blacklists its host, as
Horovod would. Everything else (success, all failed, the reset limit) is Horovod's code.

Two settings of its rendezvous server change too (``tune_rendezvous``): the listen backlog
and daemon handler threads.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

MAX_SLOT_FAILURES = 3
# listen(2)'s backlog for the rendezvous server; the kernel clamps it to net.core.somaxconn
RENDEZVOUS_BACKLOG = 65535
log = logging.getLogger("ringtrain.hvd_driver")


def spared(failed: Iterable[tuple[str, int]], ready: Iterable[tuple[str, int]],
           counts: Counter[tuple[str, int]]) -> list[tuple[str, int]]:
    """The failed (host, slot)s whose host lives (another of its workers is ready) and whose
    slot has not failed ``MAX_SLOT_FAILURES`` times (``counts``, updated here). Pure but for
    ``counts``."""
    alive = {host for host, _ in ready}
    out = []
    for key in sorted(failed):
        counts[key] += 1
        if key[0] in alive and counts[key] <= MAX_SLOT_FAILURES:
            out.append(key)
    return out


def patch() -> None:
    """Change the rule in Horovod's driver (before horovodrun builds one)."""
    from horovod.runner.elastic import registration  # noqa: PLC0415 - horovodrun's process

    registry = registration.WorkerStateRegistry
    horovods = registry._on_workers_recorded
    counts: Counter[tuple[str, int]] = Counter()

    def _on_workers_recorded(self: Any) -> None:
        if self.count(registration.SUCCESS) == 0:
            keep = spared(self.get(registration.FAILURE), self.get(registration.READY), counts)
            for host, slot in keep:
                # not a failure of the host: its slot is freed, so the driver refills it
                self._workers[registration.FAILURE].discard((host, slot))
                slots = self._driver._host_assignments.get(host, [])
                self._driver._host_assignments[host] = [s for s in slots
                                                        if s.local_rank != slot]
                log.warning("ringtrain: %s[%d] failed while the host's other workers are "
                            "ready: the host stays; a new worker starts in its slot", host, slot)
        horovods(self)

    registry._on_workers_recorded = _on_workers_recorded


def tune_rendezvous() -> None:
    """Two settings of Horovod's rendezvous server (``RendezvousHTTPServer``), which every
    worker of a re-form reaches at once, each holding its ``rank_and_size`` request in a
    thread until all have asked (the driver's barrier):

    - the listen backlog: socketserver's default is 5, so the kernel drops the connections
      that do not fit and each waits for a SYN retransmit (1 s, then 3 s, 7 s...);
    - daemon handler threads: socketserver keeps a list of its non-daemon threads and sweeps
      the whole list on every request, so N held requests cost O(N^2) in the one thread that
      accepts (seconds at 4,096). Horovod's server thread is a daemon already; nothing joins
      these.

    Measured in docs/SCALE.md (``bench/launcher/rendezvous_scale.py``)."""
    from horovod.runner.http import http_server  # noqa: PLC0415 - horovodrun's process

    http_server.RendezvousHTTPServer.request_queue_size = RENDEZVOUS_BACKLOG
    http_server.RendezvousHTTPServer.daemon_threads = True


def main() -> Any:
    """horovodrun's own entry point (its ``sys.exit(run_commandline())``), the rule changed."""
    patch()
    tune_rendezvous()
    from horovod.runner.launch import run_commandline  # noqa: PLC0415

    sys.argv[0] = "horovodrun"
    return run_commandline()


if __name__ == "__main__":
    sys.exit(main())
