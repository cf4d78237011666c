"""Host names resolved once per launch, in parallel and under one overall budget.

A name that does not resolve usually answers in a millisecond, but a dropped DNS query waits
for the resolver's 5 or 10 s timeout (measured here and common at real sites), and a
launcher that asked for each of 1,000 hosts in turn spent minutes before the first SSH
connection. So every name is looked up at most once per process (answers are kept for
``TTL_S``), by at most ``CONCURRENCY`` daemon threads at a time, and whoever asks waits at
most ``budget_s`` for all of them together (and not again for a name still hanging from an
earlier call): a name not answered by then counts as not resolved here (the probe, over SSH,
says what is wrong with it; mpirun resolves names itself). The threads are daemons, so a
look-up still hanging never holds the launcher's exit.

``lookup`` is the seam: ``socket.getaddrinfo`` in real use, a function that sleeps in tests.
"""

from __future__ import annotations

import contextlib
import ipaddress
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

CONCURRENCY = 64
BUDGET_S = 1.0  # a name that answers does so in milliseconds; a dropped query takes 5-10 s
TTL_S = 300.0

Lookup = Callable[[str], Sequence[str]]


def getaddrinfo_lookup(name: str) -> tuple[str, ...]:
    """Every address ``name`` resolves to (IPv4 and IPv6), in the resolver's order."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


class Resolver:
    """Names -> addresses, each name looked up once (an empty tuple: did not resolve)."""

    def __init__(self, lookup: Lookup = getaddrinfo_lookup, concurrency: int = CONCURRENCY,
                 ttl_s: float = TTL_S) -> None:
        self._lookup = lookup
        self._concurrency = concurrency
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._done: dict[str, tuple[float, tuple[str, ...]]] = {}  # name -> (when, addresses)
        self._pending: dict[str, threading.Event] = {}

    def resolve(
        self, names: Iterable[str], budget_s: float = BUDGET_S
    ) -> dict[str, tuple[str, ...]]:
        """Addresses of every name, waiting at most ``budget_s`` in all."""
        wanted = list(dict.fromkeys(names))
        deadline = time.monotonic() + budget_s
        todo: list[str] = []
        waits: list[threading.Event] = []
        with self._lock:
            now = time.monotonic()
            for name in wanted:
                if _literal(name) is not None or self._fresh(name, now):
                    continue
                if name in self._pending:
                    continue  # still hanging from an earlier call: its budget was spent
                event = self._pending[name] = threading.Event()
                todo.append(name)
                waits.append(event)
        if todo:
            self._start(todo)
        for event in waits:
            if not event.wait(max(0.0, deadline - time.monotonic())):
                break
        with self._lock:
            now = time.monotonic()
            return {name: self._known(name, now) for name in wanted}

    def _fresh(self, name: str, now: float) -> bool:
        hit = self._done.get(name)
        return hit is not None and now - hit[0] < self._ttl_s

    def _known(self, name: str, now: float) -> tuple[str, ...]:
        literal = _literal(name)
        if literal is not None:
            return (literal,)
        hit = self._done.get(name)
        return hit[1] if hit is not None and now - hit[0] < self._ttl_s else ()

    def _start(self, names: list[str]) -> None:
        work: queue.SimpleQueue[str] = queue.SimpleQueue()
        for name in names:
            work.put(name)
        for i in range(min(self._concurrency, len(names))):
            threading.Thread(target=self._work, args=(work,), daemon=True,
                             name=f"ringtrain-dns-{i}").start()

    def _work(self, work: queue.SimpleQueue[str]) -> None:
        while True:
            try:
                name = work.get_nowait()
            except queue.Empty:
                return
            addresses: tuple[str, ...] = ()
            with contextlib.suppress(Exception):  # a resolver bug is "did not resolve"
                addresses = tuple(self._lookup(name))
            with self._lock:
                self._done[name] = (time.monotonic(), addresses)
                event = self._pending.pop(name, None)
            if event is not None:
                event.set()


def _literal(name: str) -> str | None:
    if ":" not in name and not name[:1].isdigit():
        return None  # a name, not an address: no need to parse it
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return None


_RESOLVER = Resolver()


def resolve(names: Iterable[str], budget_s: float = BUDGET_S) -> dict[str, tuple[str, ...]]:
    """The process's shared resolver (one launch, its restarts and its ring check)."""
    return _RESOLVER.resolve(names, budget_s)


def this_host() -> str:
    """This machine's host name (no look-up)."""
    return socket.gethostname()


def can_bind(address: str) -> bool:
    """Whether ``address`` is one of this machine's own (it can bind a socket to it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def route_source(address: str) -> str | None:
    """The local address the kernel picks to reach ``address`` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            sockname: Any = sock.getsockname()
            return str(sockname[0])
    except OSError:
        return None
