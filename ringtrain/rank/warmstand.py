"""The stand-in's side of a warm spare (rank/warm.py): ``ringtrain.rank.entry`` hands its rank to
a warm process of the run on this host over the abstract Unix socket ``address`` and waits for
it, passing signals on. Apart from warm.py so that the entry, which the warm program runs,
does not import the warm program (no circle). Standard library only.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import struct
from typing import Any

MAX_SLOTS = 16
MAX_HEADER = 1 << 20  # argv + environment, as JSON
LEN = struct.Struct("!I")


def address(run_id: str, slot: int) -> bytes:
    return f"\0ringtrain-warm-{os.getuid()}-{run_id}-{slot}".encode()


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])  # pid, uid, gid


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv_msg(sock: socket.socket) -> Any:
    """One length-prefixed JSON message (at most 64 KiB: an ack or an exit status)."""
    size = LEN.unpack(recv_exact(sock, 4))[0]
    if size > 65536:
        raise ValueError("message too long")
    return json.loads(recv_exact(sock, size))


def handoff(run_id: str, argv: list[str], timeout: float = 5.0) -> int | None:
    """Hand this rank to a warm process of ``run_id`` on this host and wait for it: its exit
    status (128+9 if it was killed). None when no warm process took it: start cold."""
    for slot in range(MAX_SLOTS):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address(run_id, slot))
            if peer_uid(sock) != os.getuid():
                sock.close()
                continue
            header = json.dumps({"argv": argv, "env": dict(os.environ),
                                 "cwd": os.getcwd()}).encode()
            sock.sendmsg([LEN.pack(len(header)) + header],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
            pid = int(recv_msg(sock)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            sock.close()
            continue
        return _stand_in(sock, pid)
    return None


def _stand_in(sock: socket.socket, pid: int) -> int:
    def pass_on(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, pass_on)
    sock.settimeout(None)
    try:
        status = int(recv_msg(sock)["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        status = 128 + signal.SIGKILL  # the rank went without a word: killed
    return status if 0 <= status <= 255 else 1
