"""Free TCP ports for the simulated cluster's servers (S3, Slurm, ...), asked of the kernel."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from pathlib import Path


def ports_free(ports: Iterable[int], ip: str = "127.0.0.1") -> bool:
    """Whether every port can be bound on ``ip`` now. Like Go's and the JVM's listeners,
    TIME_WAIT leftovers of a stopped server do not count (SO_REUSEADDR)."""
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((ip, port))
            except OSError:
                return False
    return True


def server_state(state_dir: Path) -> dict[str, object]:
    """A server's ``state_dir/server.json`` (its PID and ports: the S3 and HDFS servers), or
    {} when it is missing or unreadable."""
    try:
        state = json.loads((state_dir / "server.json").read_text())
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def free_ports(count: int, ip: str = "127.0.0.1", *, offsets: tuple[int, ...] = (0,),
               avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports the kernel hands out, each with ``port + offset`` free too for
    every offset (a server that listens on a second port at a fixed distance)."""
    out: list[int] = []
    avoided = set(avoid)
    while len(out) < count:
        with socket.socket() as s:
            s.bind((ip, 0))
            port = int(s.getsockname()[1])
        wanted = [port + o for o in offsets]
        taken = avoided | {p + o for p in out for o in offsets}
        if max(wanted) < 65536 and not taken & set(wanted) and ports_free(wanted, ip):
            out.append(port)
    return out
