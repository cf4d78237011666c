"""Warm spares under ``--elastic --spares N``: on every host held as a spare, one waiting
process per slot that has already imported TensorFlow and Horovod (``ringtrain.rank.warm``).
When Horovod starts a rank there, the rank's entry hands itself to one of them, and the join
skips the interpreter's start and the imports.

Each warm process runs as one long SSH command through the Remote seam, in a thread of its own:
it ends, unused, when that session ends (the launcher gone) or after ``IDLE_TIMEOUT_S``, and
the teardown's reaper finds it by ``RINGTRAIN_RUN_ID``, as it finds ranks. ``keep`` is called
with the spare list whenever it changes (a host back from its cooldown as a spare gets warm
processes again); a slot whose warm process is still alive is left as it is.

A host back from its cooldown that rejoins a short job gets warm processes too (``warm_up``,
from the keeper), and is offered to Horovod's driver once they are ready (their imports done)
or ``READY_TIMEOUT_S`` has passed: the survivors reset for it at their next commit and their
new ring would otherwise wait for its cold start (a Python, TensorFlow and Horovod import each).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ringtrain.hostfile import Host
from ringtrain.rank import envvars, isolated
from ringtrain.remote import Remote

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 24 * 3600.0
_SESSION_S = IDLE_TIMEOUT_S + 600.0  # the SSH command's own deadline, past the idle timeout
READY_TIMEOUT_S = 60.0  # a rejoining host's warm processes: their imports, at most


def warm_argv(python: str, run_id: str, slot: int) -> tuple[str, ...]:
    """The warm process's command: the run id in its environment (the reaper's mark), run
    from ``/`` (``isolated.from_root``): not ``-I``, since it imports TensorFlow and Horovod
    from wherever the ranks find them and then becomes a rank."""
    return _warm_command(python, run_id, "--slot", str(slot),
                         "--idle-timeout", f"{IDLE_TIMEOUT_S:g}")


def await_argv(python: str, run_id: str, slots: int, timeout: float) -> tuple[str, ...]:
    """The command that waits until ``slots`` warm processes of the run listen on a host."""
    return _warm_command(python, run_id, "--await-slots", str(slots), "--timeout", f"{timeout:g}")


def _warm_command(python: str, run_id: str, *args: str) -> tuple[str, ...]:
    return isolated.from_root(("env", f"{envvars.RUN_ID}={run_id}", python, "-m",
                               "ringtrain.rank.warm", run_id, *args), "ringtrain-warm")


class WarmSpares:
    def __init__(self, remote: Remote, python: str, run_id: str,
                 hosts: Mapping[str, Host], note: Callable[[str], None]) -> None:
        self._remote, self._python, self._run_id = remote, python, run_id
        self._hosts, self._note = hosts, note
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], threading.Thread] = {}  # (host, slot)

    def keep(self, spares: Sequence[tuple[str, int]]) -> None:
        """A warm process in each slot of ``spares`` (name, slots) that has none."""
        started = self._ensure(spares)
        if started:
            self._note(f"elastic: warm processes starting on spare {', '.join(started)}")

    def warm_up(self, name: str, slots: int, timeout: float = READY_TIMEOUT_S) -> float | None:
        """Warm processes on ``name`` (a host back from its cooldown), and the seconds until
        all ``slots`` of them listen there; None when they did not within ``timeout``."""
        host = self._hosts.get(name)
        if host is None or slots <= 0:
            return None
        began = time.monotonic()
        self._ensure(((name, slots),))
        argv = await_argv(self._python, self._run_id, slots, timeout)
        result = self._remote.run([host], argv, timeout + 30.0).get(name)
        return time.monotonic() - began if result is not None and result.ok else None

    def _ensure(self, hosts: Sequence[tuple[str, int]]) -> list[str]:
        started = []
        with self._lock:
            for name, slots in hosts:
                host = self._hosts.get(name)
                if host is None:
                    continue
                # per slot: a host whose other slots' processes still wait (or became ranks)
                # gets the missing ones, so an await of all its slots can be met
                new = [slot for slot in range(slots)
                       if not ((t := self._running.get((name, slot))) and t.is_alive())]
                for slot in new:
                    self._running[(name, slot)] = self._start(host, slot)
                if new:
                    started.append(f"{name} ({len(new)})")
        return started

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
            return tuple(sorted({n for (n, _), t in self._running.items() if t.is_alive()}))
