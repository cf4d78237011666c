"""What the control server knows of each rank and of the job, as immutable values. PURE.

``ControlServer.snapshot()`` (control.py) returns a ``Snapshot``; the supervision checks
(supervise.py) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringtrain.launch.record.steptimes import StepTimes


@dataclass(frozen=True, slots=True)
class RankState:
    rank: int
    host: str
    pid: int
    start: int | None = None
    ppid: int | None = None
    parent: str = ""
    parent_start: int | None = None
    connected: bool = True
    init_begun: bool = False
    initialized: bool = False
    ring: int = 0  # the ring (hvd.init generation) the rank last said it formed; 0: none yet
    ring_at: float = 0.0  # when it said so
    begun_at: float = 0.0  # when it last said its hvd.init() began (after ring_at: forming)
    started: float | None = None  # when its process started (epoch seconds), as it said
    gone_at: float | None = None  # when its connection closed
    # since when the rank waits inside TensorFlow for its cluster's other tasks (None: not
    # waiting); TensorFlow holds the GIL there, so its heartbeats stop
    forming_since: float | None = None
    last_heard: float = 0.0
    done_at: float | None = None  # when the rank said its script returned
    api: tuple[str, ...] = ()  # parts of ringtrain.keras the rank uses ("checkpoint", ...)
    steps: StepTimes | None = None  # from the rank's step timer (straggler detection)

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def forming_ring(self) -> bool:
        """Its ``hvd.init()`` runs: it began after the rank's last ring formed."""
        return self.begun_at > self.ring_at


@dataclass(frozen=True, slots=True)
class Progress:
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    loss: float | None = None
    samples_per_s: float | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Restored:
    """--elastic: rank 0 restored the state from a rank's memory commit after a reset."""
    at: float
    source: int | None
    epoch: int | None
    step: int | None
    size: int | None  # ranks after it
    nbytes: int | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    ranks: tuple[RankState, ...]
    progress: Progress | None
    now: float
    resets: tuple[float, ...] = ()  # --elastic: when ranks began a reset (ringtrain.keras)
    restores: tuple[Restored, ...] = ()  # ... and when the state was restored
