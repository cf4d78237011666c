"""The control server's waiting room: connections before their handshake's end. Pure.

Anyone who can reach the control port can connect, so what a peer may hold before it proves
the token is bounded three ways: ``limit`` connections in all (the job's rank count or more:
every rank may check in at once), ``per_source`` from one address (more than one host's ranks,
so one peer cannot take every place: 64 idle connections from one address no longer keep a
real rank out), and time: a connection that has sent nothing within ``idle_s`` is closed
(a rank's agent says hello as soon as it connects), one that has not finished the handshake
within ``hello_s`` too. A rank's agent whose connection is closed before the handshake's end
connects again (rank/agent.py), so a place freed is a place it gets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

C = TypeVar("C", bound=Hashable)

PER_SOURCE = 16  # at least; a host's ranks connect from one address
IDLE_S = 2.0
# the listening socket's backlog: all the kernel allows (it clamps to net.core.somaxconn).
# 16,000 simulated ranks checking in at once overflowed 1024 (bench control_scale): each
# overflow is a rank that waits a SYN retransmit, 1 s, then 3 s, 7 s... (issue 41)
LISTEN_BACKLOG = 65535


@dataclass(slots=True)
class _Wait:
    source: str
    opened: float
    heard: bool = False  # it sent something (its hello)


class Admission(Generic[C]):
    """Which connections wait for their handshake, from where and since when."""

    def __init__(self, limit: int, per_source: int, idle_s: float, hello_s: float) -> None:
        self.limit, self.per_source = limit, per_source
        self.idle_s, self.hello_s = min(idle_s, hello_s), hello_s
        self._waiting: dict[C, _Wait] = {}
        self._by_source: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, conn: object) -> bool:
        return conn in self._waiting

    def admit(self, conn: C, source: str, now: float) -> bool:
        """Let ``conn`` wait for its handshake; False: no place (close it at once)."""
        if len(self._waiting) >= self.limit or self._by_source[source] >= self.per_source:
            return False
        self._waiting[conn] = _Wait(source, now)
        self._by_source[source] += 1
        return True

    def heard(self, conn: C) -> None:
        """``conn`` sent something: no longer idle (it still has ``hello_s`` in all)."""
        wait = self._waiting.get(conn)
        if wait is not None:
            wait.heard = True

    def leave(self, conn: C) -> bool:
        """``conn`` finished its handshake or is gone; whether it was waiting."""
        wait = self._waiting.pop(conn, None)
        if wait is None:
            return False
        self._by_source[wait.source] -= 1
        if self._by_source[wait.source] <= 0:
            del self._by_source[wait.source]
        return True

    def expired(self, now: float) -> list[C]:
        """The connections to close now: silent past ``idle_s``, unfinished past ``hello_s``."""
        return [conn for conn, wait in self._waiting.items()
                if now - wait.opened > (self.hello_s if wait.heard else self.idle_s)]
