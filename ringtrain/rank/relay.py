"""A program the rank entry runs as its child (a wrapper script, a binary, ``-m`` is not one:
that runs in-process) still reports to the launcher through the entry.

The entry owns the rank's connection to the launcher (hello, heartbeats, the dead-man switch).
It gives the child one end of a pipe (``RINGTRAIN_RELAY_FD``) instead of the launcher's address;
a Python process in the child that uses ringtrain (``ringtrain.keras``, ``progress.report``)
finds no launcher address, sees the relay and writes its events there; the entry forwards them.
Only what a script reports is forwarded (progress, Horovod init, API use, done), never a hello,
and never what the entry itself assigns (``ASSIGNED``: the message's sequence number, its rank):
a child that wrote ``seq`` could otherwise push its rank's number past any the entry sends, and
the launcher would drop every later message of that rank as a replay. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, BinaryIO

from ringtrain.rank import envvars
from ringtrain.rank.events import decode, encode

FORWARDED = ("progress", "steps", "init", "init_begin", "tf_forming", "tf_formed", "api", "done")
ASSIGNED = ("t", "seq", "rank")  # the entry's, never the child's


class RelaySender:
    """The child's side: what ``RankAgent`` offers a script (send, done, api), over the pipe."""

    def __init__(self, fd: int) -> None:
        self._stream: BinaryIO | None = os.fdopen(fd, "wb", buffering=0)
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        with self._lock:
            stream = self._stream
            if stream is None:
                return
            try:
                stream.write(encode(kind, **fields))
            except (OSError, ValueError):  # the entry is gone: the launcher will know
                self._stream = None

    def done(self) -> None:
        self.send("done")

    def api(self, **features: Any) -> None:
        self.send("api", **features)


def from_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> RelaySender | None:
    value = environ.get(envvars.RELAY_FD, "")
    if not value.isdigit():
        return None
    try:
        os.fstat(int(value))
    except OSError:
        return None
    return RelaySender(int(value))


def forward(read_fd: int, send: Any) -> threading.Thread:
    """The entry's side: a thread passing each forwarded event to ``send(kind, **fields)``."""

    def pump() -> None:
        with contextlib.suppress(OSError, ValueError), os.fdopen(read_fd, "rb") as stream:
            for line in stream:
                msg = decode(line)
                if msg is None or msg["t"] not in FORWARDED:
                    continue
                send(msg["t"], **{k: v for k, v in msg.items() if k not in ASSIGNED})

    thread = threading.Thread(target=pump, name="ringtrain-relay", daemon=True)
    thread.start()
    return thread
