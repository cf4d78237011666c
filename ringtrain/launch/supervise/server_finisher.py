"""Supervision of a TF parameter-server job: the servers never return, so the launcher ends
them once the chief is done (the cluster itself is ``tfcluster``, pure; the port check before
the job is the pre-flight's, ``probe/tfports.py``)."""

from __future__ import annotations

from collections.abc import Callable

from ringtrain.launch.plan import tfcluster
from ringtrain.launch.record.snapshot import Snapshot


class ServerFinisher:
    """tf-ps: ps and worker tasks serve until told otherwise (``server.join()``), so the job
    ends when the chief's does. Once the chief said "done" and its process is gone (or 10 s
    after "done", should it hang in finalisation), every rank is told "finish": its agent says
    "done" and exits 0, and mpirun ends as for any job that succeeded."""

    GRACE_S = 10.0

    def __init__(self, broadcast: Callable[[str], None]) -> None:
        self.broadcast = broadcast
        self.sent_at: float | None = None

    def tick(self, snap: Snapshot, note: Callable[[str], None]) -> None:
        """A supervision watcher (detect.Watcher) that never names a fault."""
        chief = next((r for r in snap.ranks if r.rank == tfcluster.CHIEF_RANK), None)
        if chief is None or chief.done_at is None:
            return
        if self.sent_at is None and (not chief.connected
                                     or snap.now - chief.done_at > self.GRACE_S):
            note("the chief finished: ending the ps and worker tasks")
            self.sent_at = snap.now
        if self.sent_at is not None and snap.now - self.sent_at < 30:
            self.broadcast("finish")  # again each tick: a rank may miss one send
