"""The loop side of launch/spares.py under ``--elastic``: apply a lost host to the pool, check
hosts whose cooldown ended (in a thread, one at a time, so supervision never waits on SSH) and
publish the discovery list Horovod's driver reads every second when it changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from ringtrain.hostfile import Inventory
from ringtrain.launch.launchers import ELASTIC_HOSTS
from ringtrain.launch.recheck import DEFAULT_POLICY, look
from ringtrain.launch.rundir import write_private
from ringtrain.launch.spares import Pool, due, lose, pool_of, readmit, split
from ringtrain.remote import Remote
from ringtrain.spec import ElasticPolicy


class SpareKeeper:
    """Losses in, re-checks out, the list published when it changes."""

    def __init__(self, pool: Pool, cooldown_range: tuple[int, int],
                 publish: Callable[[str], None], check: Callable[[str], str | None],
                 note: Callable[[str], None], clock: Callable[[], float]) -> None:
        self.pool, self.range = pool, cooldown_range
        self._publish, self._check, self._note, self._clock = publish, check, note, clock
        self._lock = threading.Lock()
        self._checking: threading.Thread | None = None

    def lost(self, host: str) -> None:
        with self._lock:
            self.pool, said = lose(self.pool, host, self._clock(), self.range)
            text = self.pool.text()
        if said is not None:
            self._note(said)
            self._publish(text)

    def tick(self) -> None:
        if self._checking is not None and self._checking.is_alive():
            return
        ready = due(self.pool, self._clock())
        if ready:
            self._checking = threading.Thread(target=self._recheck, args=(ready[0],),
                                              name=f"spare-check-{ready[0]}", daemon=True)
            self._checking.start()

    def _recheck(self, host: str) -> None:
        problem = self._check(host)  # None: it answers and its GPUs are free
        with self._lock:
            before = self.pool.text()
            self.pool, said = readmit(self.pool, host, problem is None, self._clock(),
                                      self.range, problem or "")
            text = self.pool.text()
        self._note(said)
        if text != before:
            self._publish(text)


def keeper_for(el: ElasticPolicy, inventory: Inventory, attempt_dir: Path, remote: Remote,
               note: Callable[[str], None]) -> SpareKeeper:
    """The attempt's keeper: publishes to its discovery list (``launchers.ELASTIC_HOSTS``),
    and checks a rested host with one ``nvidia-smi`` over SSH (recheck.look)."""
    active, spares = split(inventory.hosts, el.spares)
    by_name = {h.name: h for h in inventory.hosts}

    def publish(text: str) -> None:
        write_private(attempt_dir / ELASTIC_HOSTS, text)

    def check(name: str) -> str | None:
        busy, unknown = look(remote, (by_name[name],), DEFAULT_POLICY)
        if name in unknown:
            return unknown[name]
        return f"GPUs busy: {busy[name][0]}" if busy.get(name) else None

    if spares:
        note(f"elastic: {', '.join(h.name for h in spares)} held back as spare(s)")
    return SpareKeeper(pool_of(active, spares), el.cooldown_range, publish, check, note,
                       time.monotonic)
