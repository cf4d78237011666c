"""The loop side of launch/elastic/spares.py under ``--elastic``: apply a lost host to the
pool, check hosts whose cooldown ended (in a thread, so supervision never waits on SSH: every
host due at that tick in one probe, each judged alone, their warm processes awaited
``CHECKS_AT_ONCE`` at a time, and the list published once for all of them, so hosts lost
together come back in one re-form of the ring, not one each), publish the discovery list
Horovod's driver reads every second when it changes, and keep warm processes waiting on the
spares (warmspares.py).

A warm spare takes a lost host's place in the round that forms the new ring (issue 38 item
2): the list goes out at once, without the lost host and with the spare, and the driver
(``ringtrain.hvd_driver.one_round``) waits for it while the keeper says it holds warm spare
slots (the attempt's ``elastic-spares`` file). A cold spare (``--cold-spares``) is held back
until the survivors train again: their ring would wait for its imports.

A host back from its cooldown that passes its check is offered once warm processes wait on
it (``rejoin``, WarmSpares.warm_up; not with ``--cold-spares``): the survivors reset for it
at their next commit, and their new ring then waits for a hand-over, not a cold start."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.elastic.spares import (
    Pool,
    Slots,
    due,
    joining,
    lose,
    pool_of,
    readmit,
    split,
)
from ringtrain.launch.elastic.warmspares import WarmSpares
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.plan.launchers import ELASTIC_HOSTS, ELASTIC_SPARES
from ringtrain.launch.plan.make import LaunchPlan
from ringtrain.probe.gate import evaluate_remembering, gpu_rule, policy_for
from ringtrain.probe.hostprobe import probe
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import HostVerdict
from ringtrain.remote import Remote
from ringtrain.spec import LaunchSpec

SPARE_DELAY_S = 5.0
CHECKS_AT_ONCE = 8  # rested hosts whose warm processes are awaited at once
# A lost host leaves the published list once the survivors train again, not at once: Horovod's
# driver has blacklisted it by then (for its cooldown), so its removal changes nothing Horovod
# uses. Published at once, it reached the driver as "hosts updated (removed only)" after its
# failure round had begun, and every survivor reset a second time (issue 38 item 2). Held at
# most half of the cooldown's low end (Horovod re-admits the host after that), or this long.
REMOVAL_HOLD_S = 30.0
T = TypeVar("T")


class SpareKeeper:
    """Losses in, re-checks out, the list published when it changes.

    A spare that takes a lost host's place is held out of the published list until the
    survivors train again (``release``, from ElasticWatch), or SPARE_DELAY_S at most, so their
    new ring never waits for a process still starting; it joins at the next commit (Horovod's
    hosts-updated reset), while the others train. The lost host's removal waits for the same
    moment (REMOVAL_HOLD_S)."""

    def __init__(self, pool: Pool, cooldown_range: tuple[int, int],
                 publish: Callable[[str], None],
                 check: Callable[[tuple[str, ...]], Mapping[str, str | None]],
                 note: Callable[[str], None], clock: Callable[[], float],
                 warm: Callable[[Slots], None] | None = None,
                 hosts: tuple[Host, ...] = (),
                 rejoin: Callable[[str, int], float | None] | None = None) -> None:
        self.pool, self.range = pool, cooldown_range
        self._publish, self._check, self._note, self._clock = publish, check, note, clock
        # warm spares: called with the spares whenever they change (warm processes, and the
        # count of spare slots the driver may wait for)
        self._warm = warm
        # a rested host's warm processes, awaited before it is offered (seconds, or None)
        self._rejoin = rejoin
        self.hosts = hosts  # every host the job may use, spares included (the teardown's)
        self._lock = threading.Lock()
        self._out = threading.Lock()  # taken before _lock, never under it: publishing
        self._checking: threading.Thread | None = None
        self._held: tuple[frozenset[str], float] | None = None  # spares not yet offered
        self._stale: float | None = None  # since when a loss is not published
        self._hold_s = min(REMOVAL_HOLD_S, cooldown_range[0] / 2)
        if warm is not None:
            warm(pool.spares)

    def lost(self, host: str) -> None:
        offer = False
        with self._lock:
            before = {name for name, _ in self.pool.active}
            self.pool, said = lose(self.pool, host, self._clock(), self.range)
            joined = frozenset(n for n, _ in self.pool.active if n not in before)
            if joined and self._warm is not None:
                # in the round forming now: the driver waits for this list (hvd_driver)
                offer, self._stale = True, None
            elif joined:
                held = self._held[0] if self._held else frozenset()
                self._held = (held | joined, self._clock())
            if said is not None and self._stale is None and not offer:
                self._stale = self._clock()
        if said is not None:
            self._note(said)
        if offer:
            self._publish_now()
            self._note(f"elastic: {', '.join(sorted(joined))} offered to Horovod's driver "
                       "now: its warm process joins the ring the survivors form again")
        if joined:
            self._warm_now()

    def release(self) -> None:
        """Offer the held spares now: the survivors train again (or the wait is over)."""
        with self._lock:
            held, self._held = self._held, None
            stale, self._stale = self._stale, None
        if held is not None:
            self._note(f"elastic: {', '.join(sorted(held[0]))} offered to Horovod's driver: "
                       "joins at the next commit")
        if held is not None or stale is not None:
            self._publish_now()

    def _publish_now(self) -> None:
        """Publish the list as it is now. The watch's thread (a loss, a release) and the
        check's both publish: whichever does so last publishes the newest list, never one it
        computed before the other's change."""
        with self._out:
            with self._lock:
                text = self._text()
            self._publish(text)

    def _warm_now(self) -> None:
        """Tell the warm processes (and the spares file) what the spares are now."""
        if self._warm is not None:
            with self._out:
                with self._lock:
                    spares = self.pool.spares
                self._warm(spares)

    def _text(self) -> str:
        held = self._held[0] if self._held else frozenset()
        return "".join(f"{name}:{slots}\n" for name, slots in self.pool.active
                       if name not in held)

    def tick(self) -> None:
        now = self._clock()
        if ((self._held is not None and now - self._held[1] >= SPARE_DELAY_S)
                or (self._stale is not None and now - self._stale >= self._hold_s)):
            self.release()
        if self._checking is not None and self._checking.is_alive():
            return
        ready = due(self.pool, self._clock())
        if ready:
            self._checking = threading.Thread(target=self._recheck, args=(ready,),
                                              name=f"spare-check-{ready[0]}", daemon=True)
            self._checking.start()

    def _recheck(self, hosts: tuple[str, ...]) -> None:
        checked = self._check(hosts)  # None: it answers and its GPUs are free
        problems = {h: checked.get(h, "not checked") for h in hosts}
        passed = [h for h in hosts if problems[h] is None]
        if passed and self._rejoin is not None:
            rejoin = self._rejoin
            with self._lock:  # a host that comes back as a spare gets them as a spare
                joins = joining(self.pool, passed)
                slots = {r.name: r.slots for r in self.pool.resting}

            def warm_up(host: str) -> str:
                took = rejoin(host, slots.get(host, 0))
                return (f"elastic: {host}'s warm processes ready after {took:.1f} s" if took
                        is not None else f"elastic: {host}'s warm processes not ready: its "
                        "ranks start cold")
            for said in self._each(warm_up, joins):
                self._note(said)
        notes = []
        # the pool may have changed during the warm-ups (a loss, no spare left): a host that
        # passed and joins now without having been warmed starts cold, as before warm return
        with self._lock:
            before = self._text()
            for host in hosts:
                self.pool, said = readmit(self.pool, host, problems[host] is None,
                                          self._clock(), self.range, problems[host] or "")
                notes.append(said)
            text = self._text()
            if text != before:
                self._stale = None  # published now, with any loss still held
        if text != before:
            self._publish_now()
        for said in notes:
            self._note(said)
        self._warm_now()

    @staticmethod
    def _each(fn: Callable[[str], T], hosts: Sequence[str]) -> list[T]:
        """``fn`` of every host, CHECKS_AT_ONCE at a time, in the hosts' order."""
        if len(hosts) <= 1:
            return [fn(h) for h in hosts]
        with ThreadPoolExecutor(min(CHECKS_AT_ONCE, len(hosts)),
                                thread_name_prefix="spare-check") as pool:
            return list(pool.map(fn, hosts))


def _problem(hv: HostVerdict, busy: Collection[str]) -> str | None:
    """Why a rested host may not come back (its verdict), or None."""
    if not hv.usable:
        return hv.problems[0] if hv.problems else hv.status.value
    return f"GPUs busy: {hv.warnings[0]}" if hv.host in busy else None


def keeper_for(spec: LaunchSpec, inventory: Inventory, plan: LaunchPlan, run_dir: RunDir,
               remote: Remote, note: Callable[[str], None], python: str) -> SpareKeeper:
    """The attempt's keeper: publishes to its discovery list (``launchers.ELASTIC_HOSTS`` in
    the plan's attempt, written through the open run directory), and checks a rested host
    with the pre-flight's own probe, doctor included, over SSH: a host with a fatal Xid or a
    pending row remap is not taken back. With warm spares, it keeps warm processes on the
    spares (``python`` on the hosts, the plan's run id)."""
    el = spec.elastic
    assert el is not None  # only an --elastic launch has a keeper
    active, spares = split(inventory.hosts, el.spares)
    by_name = {h.name: h for h in inventory.hosts}
    run_id = plan.run_id

    def publish(text: str) -> None:
        run_dir.write(f"{plan.attempt_name}/{ELASTIC_HOSTS}", text)

    def check(names: tuple[str, ...]) -> dict[str, str | None]:
        # one probe (its SSH fan-out) for them all; each host judged alone, as when it was
        # checked by itself: a verdict over the batch would hold them to the batch's majority
        # (versions) and read the GPU rule off the others
        some = replace(inventory, hosts=tuple(by_name[n] for n in names))
        report = probe(some, remote, python=spec.python, timeout=spec.preflight.timeout_s)
        out: dict[str, str | None] = {}
        for result in report.results:
            alone = ProbeReport((result,))
            one = replace(inventory, hosts=(by_name[result.host],))
            policy = gpu_rule(spec.preflight.gpus, alone, policy_for(spec, None), lambda _: None)
            verdict = evaluate_remembering(one, alone, replace(policy, on_bad_host="exclude"))
            (hv,) = verdict.hosts
            out[result.host] = _problem(hv, verdict.busy)
        return out

    if spares:
        note(f"elastic: {', '.join(h.name for h in spares)} held back as spare(s)")
    warm = WarmSpares(remote, python, run_id, by_name, note) if el.warm_spares else None

    def keep_warm(spares: Slots) -> None:
        assert warm is not None
        warm.keep(spares)
        # the spare slots Horovod's driver may wait for as a round forms (hvd_driver)
        run_dir.write(f"{plan.attempt_name}/{ELASTIC_SPARES}",
                      f"{sum(slots for _, slots in spares)}\n")

    return SpareKeeper(pool_of(active, spares), el.cooldown_range, publish, check, note,
                       time.monotonic, warm=keep_warm if warm else None,
                       hosts=tuple(inventory.hosts), rejoin=warm.warm_up if warm else None)
