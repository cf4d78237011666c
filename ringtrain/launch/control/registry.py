"""Who checked in with the control server, and through which connection (server.py).

``Registry`` keeps each rank's latest ``RankState`` in rank order (a snapshot copies them
without sorting 80,000 states a tick) and its route: its own connection, or its host's hub's
with the hub's number for it (rank/hub.py). Not thread-safe: the server's lock covers it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Generic, TypeVar

from ringtrain.launch.control.hello import Hello, claim
from ringtrain.launch.record.snapshot import RankState

C = TypeVar("C")


class Registry(Generic[C]):
    def __init__(self, elastic: bool) -> None:
        self.elastic = elastic
        self.states: dict[int, RankState] = {}  # in rank order
        self.route: dict[int, tuple[C, int | None]] = {}  # rank -> (connection, hub's number)
        self._top, self._unsorted = -1, False  # the highest rank in; one came in below it

    def check_in(self, conn: C, c: int | None, hello: Hello, now: float) -> int | str:
        """An authenticated rank claims its number (hello.claim): that number, or why not."""
        rank = claim(hello, self.states.get(hello.rank), self.elastic, self._top + 1)
        if isinstance(rank, str):
            return rank
        self.route[rank] = (conn, c)
        self._unsorted |= rank < self._top and rank not in self.states
        self._top = max(self._top, rank)
        self.states[rank] = RankState(
            rank=rank, host=hello.host, pid=hello.pid, start=hello.start, ppid=hello.ppid,
            parent=hello.parent, parent_start=hello.parent_start, last_heard=now)
        return rank

    def gone(self, rank: int | None, conn: C, now: float) -> None:
        """The connection ``rank`` spoke through ended (not one it left since)."""
        if rank is None or rank not in self.route or self.route[rank][0] is not conn:
            return
        del self.route[rank]
        if rank in self.states:
            self.states[rank] = replace(self.states[rank], connected=False, gone_at=now)

    def heard(self, rank: int, at: float) -> None:
        """Its hub last heard ``rank`` at ``at``."""
        state = self.states.get(rank)
        if state is not None:
            self.states[rank] = replace(state, last_heard=at)

    def in_order(self) -> tuple[RankState, ...]:
        if self._unsorted:  # once after a rank checked in out of order, not every tick
            self.states, self._unsorted = dict(sorted(self.states.items())), False
        return tuple(self.states.values())
