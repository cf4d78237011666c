"""One connection to the control server (server.py): a rank's own, or a host's hub's
(rank/hub.py, hubs.py), and how the server sends on it without ever blocking."""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from ringtrain.launch.control.hello import Hello
from ringtrain.launch.control.hubs import HubLink
from ringtrain.rank.events import Seal


@dataclass(eq=False)
class Conn:
    sock: socket.socket
    opened: float = 0.0
    peer: str = "?"  # the address it connected from (for the log)
    rank: int | None = None  # set once the handshake is done: the rank it speaks for
    hello: Hello | None = None  # what it said in its hello, before its auth
    nonce: str = ""  # the launcher's nonce in this connection's challenge
    noted: bool = False  # a message dropped and logged (once per connection)
    inn: Seal | None = None  # after the handshake: the peer's sealed messages, opened
    out: Seal | None = None  # ... and the launcher's, sealed
    hub: HubLink | None = None  # a host's hub: the ranks it speaks for
    buffer: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def describe(self) -> str:
        return (f"the hub on {self.hub.host[:64]!r}" if self.hub is not None
                else f"rank {self.rank}")


def send(conn: Conn, kind: str, **fields: Any) -> None:
    """One sealed message. Never block on a peer whose host stopped reading (a cut link):
    the message is dropped."""
    with conn.lock, contextlib.suppress(OSError):
        if conn.out is not None:  # not before its handshake's end
            conn.sock.send(conn.out.seal(kind, **fields), socket.MSG_DONTWAIT)


def address(peer: Any) -> str:
    return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
