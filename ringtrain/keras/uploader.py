"""Rank 0's checkpoint uploads in the background (issue 26): training goes on while a commit
uploads.

Rank 0 writes the tf.train.Checkpoint to its local staging directory at the epoch's end (the
snapshot: a local write, the only time the other ranks wait on it), then the commit protocol
(hash, upload, manifest; ``ringtrain.checkpoint``, unchanged) runs in this thread. At most one
upload is in flight: the next commit waits for it (every epoch is still committed, one behind
at most; training waits only when an upload outlasts an epoch, said in the log when long). A
storage outage is ridden out in the thread as before (retries within
``--checkpoint-grace``, then that checkpoint skipped with a warning); a failure it cannot ride
out is raised in the training thread at the next commit, or at the end: ``CommitCheckpoint``
waits for the last upload when ``fit`` ends, and the rank entry waits (``cleanup.before_done``)
before it tells the launcher the script is done. Nothing is lost silently.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
from collections.abc import Callable

from ringtrain.rank import cleanup

SAID_AFTER_S = 1.0  # a wait for the previous upload this long is said in the log


class Uploader:
    """One upload at a time, in a daemon thread; its failure kept for the training thread."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._what = ""
        self._error: BaseException | None = None
        self.waited_s = 0.0  # training's wait for uploads still running at the next commit
        self.snapshots_s: collections.deque[float] = collections.deque(maxlen=100)  # local writes
        self._hooked = False

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def raise_failure(self) -> None:
        """The last upload's failure, raised here (once)."""
        err, self._error = self._error, None
        if err is not None:
            raise err

    def before(self, what: str) -> None:
        """Before the commit of ``what``: the previous upload's failure raised, and, while it
        still runs, a wait for it (every epoch is committed, at most one behind; training
        waits only when an upload takes longer than an epoch), said when it is long."""
        self.raise_failure()
        if not self.busy():
            return
        started = time.monotonic()
        assert self._thread is not None
        self._thread.join()
        waited = time.monotonic() - started
        self.waited_s += waited
        if waited >= SAID_AFTER_S:
            print(f"checkpoint: {what} waited {waited:.1f} s for the upload of {self._what} "
                  "(one upload at a time)", flush=True)
        self.raise_failure()

    def start(self, job: Callable[[], None], what: str) -> None:
        if not self._hooked:  # the end of the script waits for the last upload
            cleanup.before_done(self.wait)
            atexit.register(self._wait_quietly)
            self._hooked = True
        self._what = what
        self._thread = threading.Thread(target=self._run, args=(job,), daemon=True,
                                        name="ringtrain-commit")
        self._thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as err:  # kept, and raised in the training thread
            self._error = err

    def wait(self) -> None:
        """Until the upload in flight has ended; its failure raised here."""
        if self._thread is not None:
            self._thread.join()
        self.raise_failure()

    def _wait_quietly(self) -> None:
        """At interpreter exit outside the rank entry: finish the upload; a failure is
        printed by the thread's own messages."""
        if self._thread is not None:
            self._thread.join()


UPLOADER = Uploader()
