"""The launcher's preemption notice, as this rank heard it.

Under Slurm, ``sbatch --signal=B:USR1@<grace>`` (``ringtrain slurm render``) sends SIGUSR1 to
``ringtrain launch`` ahead of a preemption or the time limit. The launcher tells every rank
``preempt`` over the control channel; the agent's reader thread sets this flag; rank 0's
checkpoint callback (``ringtrain.keras``) commits at the next batch end and says
``preempt_committed``; the launcher then ends the job (and requeues it when asked). Standard
library only.
"""

from __future__ import annotations

import threading

_REQUESTED = threading.Event()


def request() -> None:
    _REQUESTED.set()


def requested() -> bool:
    return _REQUESTED.is_set()
