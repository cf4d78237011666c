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
survivors' memory commit. A slot that fails more than ``MAX_SLOT_FAILURES`` times within
``SLOT_FAILURE_WINDOW_S`` (a crash loop: a process that cannot start there) blacklists its host,
as Horovod would; failures further apart (a week-long job on one server, a rank killed now and
then) never add up to that. Everything else (success, all failed, the reset limit) is
Horovod's code.

One round per fault (``one_round``, issue 38 item 2): a warm spare that ringtrain puts in a
lost host's place joins the round that forms the new ring, not a second one. Horovod's driver
reads its hosts every second in a thread of its own, and forms a round with whatever that
thread last read; a change it reads while the round forms reaches the workers as "hosts
updated" after it, a second reset of every survivor. Here, when ringtrain holds a warm spare
(the attempt's ``elastic-spares`` file, beside the discovery script: the warm spare slots), a
round that blacklisted a host reads the hosts itself, waiting up to ``HOSTS_WAIT_S`` for that
host to leave the list (ringtrain publishes a loss within a supervision poll, the spare in its
place). And no "hosts updated" is sent while a round forms: that round takes the hosts as
Horovod's thread read them, the change included.

Two settings of its rendezvous server change too (``tune_rendezvous``): the listen backlog
and daemon handler threads.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MAX_SLOT_FAILURES = 3  # failures of one slot within SLOT_FAILURE_WINDOW_S that it survives
SLOT_FAILURE_WINDOW_S = 600.0
# a round waits at most this long for ringtrain to publish a lost host's spare (it does so
# within a supervision poll, 0.2 s), reading the list every HOSTS_POLL_S
HOSTS_WAIT_S = 1.0
HOSTS_POLL_S = 0.05
SPARES_FILE = "elastic-spares"  # launchers.ELASTIC_SPARES: beside the discovery script
# listen(2)'s backlog for the rendezvous server; the kernel clamps it to net.core.somaxconn
RENDEZVOUS_BACKLOG = 65535
log = logging.getLogger("ringtrain.hvd_driver")


def spared(failed: Iterable[tuple[str, int]], ready: Iterable[tuple[str, int]],
           history: dict[tuple[str, int], list[float]], now: float) -> list[tuple[str, int]]:
    """The failed (host, slot)s whose host lives (another of its workers is ready) and whose
    slot has failed at most ``MAX_SLOT_FAILURES`` times in the last ``SLOT_FAILURE_WINDOW_S``
    (``history``: each slot's failure times, updated here). Pure but for ``history``."""
    alive = {host for host, _ in ready}
    out = []
    for key in sorted(failed):
        times = [t for t in history.get(key, []) if t > now - SLOT_FAILURE_WINDOW_S] + [now]
        history[key] = times
        if key[0] in alive and len(times) <= MAX_SLOT_FAILURES:
            out.append(key)
    return out


def patch() -> None:
    """Change the rule in Horovod's driver (before horovodrun builds one)."""
    from horovod.runner.elastic import registration  # noqa: PLC0415 - horovodrun's process

    registry = registration.WorkerStateRegistry
    horovods = registry._on_workers_recorded
    history: dict[tuple[str, int], list[float]] = {}

    def _on_workers_recorded(self: Any) -> None:
        if self.count(registration.SUCCESS) == 0:
            keep = spared(self.get(registration.FAILURE), self.get(registration.READY),
                          history, time.monotonic())
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


def awaited(failed: Iterable[tuple[str, int]], blacklisted: Callable[[str], bool],
            listed: Iterable[str]) -> set[str]:
    """The hosts this round blacklisted that the discovery list still shows: ringtrain has
    not published their loss yet. Pure."""
    shown = set(listed)
    return {host for host, _ in failed if host in shown and blacklisted(host)}


def spares_ready(text: str | None) -> int:
    """The warm spare slots ringtrain holds (its ``elastic-spares`` file; none when the file
    is missing or not a count: then nothing is waited for). Pure."""
    try:
        return max(0, int((text or "").strip() or 0))
    except ValueError:
        return 0


def read_hosts(driver: Any, spares: Callable[[], int], *,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """When this round blacklisted a host and ringtrain holds a warm spare (``spares()`` >
    0), read the hosts until that host has left ringtrain's list (the spare in its place), at
    most HOSTS_WAIT_S. Otherwise the round takes the hosts Horovod's thread read last, as
    Horovod does: running the discovery script costs 0.1-0.2 s."""
    from horovod.runner.elastic import registration  # noqa: PLC0415 - horovodrun's process

    manager = driver._host_manager
    failed = set(driver._worker_registry.get(registration.FAILURE))
    if not any(manager.is_blacklisted(host) for host, _ in failed) or spares() <= 0:
        return
    deadline = clock() + HOSTS_WAIT_S
    while True:
        try:
            manager.update_available_hosts()
        except Exception as exc:  # Horovod's own thread retries it the same way
            log.warning("ringtrain: reading the hosts for this round failed (%s): the round "
                        "takes the hosts read before", exc)
            return
        waiting = awaited(failed, manager.is_blacklisted, manager._current_hosts.host_slots)
        if not waiting or clock() >= deadline:
            if waiting:
                log.warning("ringtrain: %s still listed %.1f s into the round: it forms "
                            "without a spare in its place", ", ".join(sorted(waiting)),
                            HOSTS_WAIT_S)
            return
        sleep(HOSTS_POLL_S)


def spares_beside(discovery: Any) -> int:
    """The warm spare slots ringtrain's keeper wrote beside the driver's own discovery script
    (``HostDiscoveryScript``); 0 for any other discovery, or no such file."""
    script = getattr(discovery, "_discovery_script", None)
    if not script:
        return 0
    try:
        return spares_ready((Path(script).parent / SPARES_FILE).read_text())
    except OSError:
        return 0


def one_round() -> None:
    """Horovod's driver reads the hosts as a round forms and sends no "hosts updated" while
    one forms (the module's docstring)."""
    from horovod.runner.elastic import driver as elastic  # noqa: PLC0415 - horovodrun's

    cls = elastic.ElasticDriver
    horovods_resume, horovods_notify = cls.resume, cls._notify_workers_host_changes

    def resume(self: Any) -> None:
        with self._wait_hosts_cond:  # the discovery thread waits meanwhile
            read_hosts(self, lambda: spares_beside(self._host_manager._discovery))
            horovods_resume(self)

    def _notify_workers_host_changes(self: Any, current_hosts: Any, update_res: Any) -> None:
        if self._worker_registry.get_recorded_slots():
            log.info("ringtrain: hosts changed while a round forms: it reads them itself")
            return
        horovods_notify(self, current_hosts, update_res)

    cls.resume = resume
    cls._notify_workers_host_changes = _notify_workers_host_changes


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
    one_round()
    tune_rendezvous()
    from horovod.runner.launch import run_commandline  # noqa: PLC0415

    sys.argv[0] = "horovodrun"
    return run_commandline()


if __name__ == "__main__":
    sys.exit(main())
