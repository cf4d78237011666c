"""The status lines of a running attempt, from its supervision ticks. PURE.

``describe_arrivals`` (ranks arrived per host, hvd.init done, the TF cluster forming) and
``describe_progress`` (epoch, step, loss, throughput) render one snapshot; ``StatusLines`` keeps
what it said last and gives the lines worth a line of their own: the arrivals when they change,
the progress when the epoch changes or ``every_s`` after the last. Both doors append them to the
run's events files (launch/lifecycle.py); the CLI also shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringtrain.hostfile import Allocation
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.supervise.detect import arrivals, rank_hosts

PROGRESS_EVERY_S = 10.0


def describe_arrivals(snap: Snapshot, alloc: Allocation) -> str:
    if len(snap.ranks) > alloc.np:  # --elastic: ranks joined (a spare, a host back)
        running: dict[str, int] = {}
        for r in snap.ranks:
            if r.connected:
                running[r.host] = running.get(r.host, 0) + 1
        ready = sum(r.initialized for r in snap.ranks if r.connected)
        return (f"ranks running {sum(running.values())} (placed with {alloc.np}) ["
                + " ".join(f"{h} {n}" for h, n in sorted(running.items())) + "]"
                + (f", hvd.init done {ready}" if ready else ""))
    arrived = arrivals(snap, alloc, rank_hosts(alloc))
    ready = sum(r.initialized for r in snap.ranks)
    per_host = " ".join(f"{h.name} {arrived[h.name]}/{h.slots}" for h in alloc.hosts[:8])
    more = f" (+{len(alloc.hosts) - 8} hosts)" if len(alloc.hosts) > 8 else ""
    text = f"ranks arrived {len(snap.ranks)}/{alloc.np} [{per_host}{more}]"
    forming = sum(r.forming_since is not None for r in snap.ranks)
    return text + (f", hvd.init done {ready}/{alloc.np}" if ready else "") + (
        f", forming the TensorFlow cluster {forming}/{alloc.np}" if forming else "")


def describe_progress(snap: Snapshot) -> str | None:
    p = snap.progress
    if p is None:
        return None
    parts = []
    if p.epoch is not None:
        parts.append(f"epoch {p.epoch}" + (f"/{p.epochs}" if p.epochs else ""))
    if p.step is not None:
        parts.append(f"step {p.step}" + (f"/{p.steps}" if p.steps else ""))
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.samples_per_s is not None:
        parts.append(f"{p.samples_per_s:,.0f} samples/s")
    return "training: " + ", ".join(parts) if parts else None


@dataclass(frozen=True, slots=True)
class Status:
    """One status line worth its own line: ``arrivals`` (with whether every placed rank has
    arrived) or ``progress``."""

    text: str
    kind: str  # "arrivals" | "progress"
    all_arrived: bool = False


@dataclass
class StatusLines:
    every_s: float = PROGRESS_EVERY_S
    _arrivals: str = ""
    _epoch: tuple[object, ...] = ()
    _last_progress: float | None = field(default=None)

    def feed(self, snap: Snapshot, alloc: Allocation, now: float) -> tuple[Status, ...]:
        """The new lines of this tick (``now``: a monotonic clock's seconds)."""
        out: list[Status] = []
        text = describe_arrivals(snap, alloc)
        if text != self._arrivals:
            self._arrivals = text
            out.append(Status(text, "arrivals", len(snap.ranks) == alloc.np))
        progress = describe_progress(snap)
        p = snap.progress
        if progress and p is not None:
            key = (p.epoch,)
            last = self._last_progress
            if key != self._epoch or last is None or now - last > self.every_s:
                self._epoch, self._last_progress = key, now
                out.append(Status(progress, "progress"))
        return tuple(out)
