"""A preemption notice (SIGUSR1, from ``sbatch --signal=B:USR1@<grace>``): rank 0 commits a
checkpoint at once, then the job ends; with ``--requeue`` the CLI asks Slurm to requeue it.

``ask_commit`` broadcasts ``preempt`` and waits for rank 0's ``preempt_committed`` (at most
``wait_s``, or not at all when no rank commits checkpoints through ``ringtrain.keras``: a script
without it has nothing to commit). ``Preemption`` is the value the session keeps and result.json
reports as the run's stop reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

DEFAULT_WAIT_S = 60.0  # under the sbatch --signal lead time ringtrain renders (120 s)


class _Control(Protocol):
    preempt_commit: tuple[int | None, int | None] | None

    def commits_checkpoints(self) -> bool: ...

    def broadcast(self, kind: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Preemption:
    signal: str
    committed: tuple[int | None, int | None] | None  # (epochs finished, step) rank 0 committed
    waited_s: float
    asked: bool  # False: no rank commits checkpoints, nothing was asked

    def describe(self) -> str:
        if self.committed is not None:
            epoch, step = self.committed
            return (f"preempted ({self.signal}): rank 0 committed step {step} (epoch {epoch} "
                    f"under way) in {self.waited_s:.1f} s")
        if not self.asked:
            return (f"preempted ({self.signal}): the script commits no checkpoints "
                    "(ringtrain.keras), nothing to commit")
        return (f"preempted ({self.signal}): rank 0 committed nothing within "
                f"{self.waited_s:.0f} s; the last committed checkpoint stands")


def ask_commit(control: _Control | None, signal: str, wait_s: float = DEFAULT_WAIT_S, *,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Preemption:
    started = clock()
    if control is None or not control.commits_checkpoints():
        return Preemption(signal, None, 0.0, asked=False)
    control.preempt_commit = None  # only an answer to this notice counts
    control.broadcast("preempt")
    while control.preempt_commit is None and clock() - started < wait_s:
        sleep(0.1)
    return Preemption(signal, control.preempt_commit, clock() - started, asked=True)
