"""Rank 0's checkpoint uploads in the background (issue 26): training goes on while a commit
uploads.

Rank 0 writes the tf.train.Checkpoint to its local staging directory at the epoch's end (the
snapshot: a local write, the only time the other ranks wait on it), then the commit protocol
(hash, upload, manifest; ``ringtrain.checkpoint``, unchanged) runs in this thread. At most one
upload is in flight: a commit that comes while one is still uploading is not taken, and the log
says so. A storage outage is ridden out in the thread as before (retries within
``--checkpoint-grace``, then that checkpoint skipped with a warning); a failure it cannot ride
out is raised in the training thread at the next commit, or at the end: ``CommitCheckpoint``
waits for the last upload when ``fit`` ends, and the rank entry waits (``cleanup.before_done``)
before it tells the launcher the script is done. Nothing is lost silently.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from ringtrain.rank import cleanup


class Uploader:
    """One upload at a time, in a daemon thread; its failure kept for the training thread."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._what = ""
        self._error: BaseException | None = None
        self.not_taken = 0  # commits that came while an upload was still running
        self._hooked = False

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def raise_failure(self) -> None:
        """The last upload's failure, raised here (once)."""
        err, self._error = self._error, None
        if err is not None:
            raise err

    def ready_for(self, what: str) -> bool:
        """Whether a commit of ``what`` can start now: the previous upload's failure first,
        then False (said so) while it still runs."""
        self.raise_failure()
        if not self.busy():
            return True
        self.not_taken += 1
        print(f"checkpoint: {what} not committed: the upload of {self._what} is still running "
              "(one upload at a time); training goes on", flush=True)
        return False

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
