"""Warm spares under ``--elastic --spares N``: on every host held as a spare, one waiting
process per slot that has already imported TensorFlow and Horovod (``ringtrain.rank.warm``).
When Horovod starts a rank there, the rank's entry hands itself to one of them, and the join
skips the interpreter's start and the imports.

Each warm process runs as one long SSH command through the Remote seam, in a thread of its own:
it ends, unused, when that session ends (the launcher gone) or after ``IDLE_TIMEOUT_S``, and
the teardown's reaper finds it by ``RINGTRAIN_RUN_ID``, as it finds ranks. ``keep`` is called
with the spare list whenever it changes (a host back from its cooldown as a spare gets warm
processes again); a host whose warm processes are still waiting is left as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from ringtrain.hostfile import Host
from ringtrain.rank import envvars, isolated
from ringtrain.remote import Remote

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 24 * 3600.0
_SESSION_S = IDLE_TIMEOUT_S + 600.0  # the SSH command's own deadline, past the idle timeout


def warm_argv(python: str, run_id: str, slot: int) -> tuple[str, ...]:
    """The warm process's command: the run id in its environment (the reaper's mark), run
    from ``/`` (``isolated.from_root``): not ``-I``, since it imports TensorFlow and Horovod
    from wherever the ranks find them and then becomes a rank."""
    return isolated.from_root(
        ("env", f"{envvars.RUN_ID}={run_id}", python, "-m", "ringtrain.rank.warm", run_id,
         "--slot", str(slot), "--idle-timeout", f"{IDLE_TIMEOUT_S:g}"), "ringtrain-warm")


class WarmSpares:
    def __init__(self, remote: Remote, python: str, run_id: str,
                 hosts: Mapping[str, Host], note: Callable[[str], None]) -> None:
        self._remote, self._python, self._run_id = remote, python, run_id
        self._hosts, self._note = hosts, note
        self._lock = threading.Lock()
        self._running: dict[str, list[threading.Thread]] = {}

    def keep(self, spares: Sequence[tuple[str, int]]) -> None:
        """Warm processes on each of ``spares`` (name, slots) that has none waiting."""
        started = []
        with self._lock:
            for name, slots in spares:
                host = self._hosts.get(name)
                if host is None or any(t.is_alive() for t in self._running.get(name, ())):
                    continue
                self._running[name] = [self._start(host, slot) for slot in range(slots)]
                started.append(f"{name} ({slots})")
        if started:
            self._note(f"elastic: warm processes starting on spare {', '.join(started)}")

    def _start(self, host: Host, slot: int) -> threading.Thread:
        thread = threading.Thread(target=self._serve, args=(host, slot), daemon=True,
                                  name=f"warm-{host.name}-{slot}")
        thread.start()
        return thread

    def _serve(self, host: Host, slot: int) -> None:
        argv = warm_argv(self._python, self._run_id, slot)
        result = self._remote.run([host], argv, _SESSION_S).get(host.name)
        if result is not None and not result.ok:
            log.info("warm process %s/%d ended: %s", host.name, slot,
                     (result.stderr or result.error or "").strip()[-300:])

    def waiting(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(n for n, ts in self._running.items()
                                if any(t.is_alive() for t in ts)))
