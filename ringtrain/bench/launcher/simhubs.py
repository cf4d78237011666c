"""Simulated hosts' hubs for bench/launcher/control_scale.py (``--hubs``, issue 41).

Each simulated host is one connection speaking the real hub protocol (rank/hub.py): it checks
in as ``role: hub`` proving the job's token, joins its ``PER_HOST`` ranks with their
identities, and once a second sends one sealed ``beat`` with every rank's age, as a hub does
for ranks that beat to it. A rank told to go quiet ages from then on; a host told to go quiet
sends nothing (a lost host). The ranks' own processes are not simulated: between a rank and
its hub is a Unix socket on the rank's own host, no cost of the launcher's.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from ringtrain.rank.events import (
    HEARTBEAT_S,
    PROTOCOL,
    Seal,
    answer,
    decode,
    encode,
    identity,
    session_key,
)


def hub_who(host: int) -> dict[str, Any]:
    return {"host": f"sim{host:05d}", "pid": 200000 + host, "start": 1}


def check_in(connect: Callable[[int], socket.socket], token: str, hosts: list[int],
             per_host: int, who: Callable[[int], dict[str, Any]],
             sel: selectors.BaseSelector) -> dict[int, tuple[socket.socket, Seal]]:
    """Every host's hub checked in and its ranks joined: host -> (socket, its seal)."""
    hubs: dict[int, tuple[socket.socket, Seal]] = {}
    for host in hosts:
        sock = connect(host)
        nonce = f"{host:032x}"
        me = hub_who(host)
        sock.sendall(encode("hello", proto=PROTOCOL, role="hub", nonce=nonce, **me))
        line = sock.makefile("rb").readline(4096)
        reply = answer(token, nonce, identity(me), line)
        if reply is None:
            raise SystemExit(f"the control server's challenge to hub {host}: {line!r}")
        sock.sendall(reply)
        challenge = decode(line)
        assert challenge is not None
        seal = Seal(session_key(token, nonce, str(challenge["nonce"])), "hub")
        for i in range(per_host):
            rank = host * per_host + i
            sock.sendall(seal.seal("join", c=i, hello={"proto": PROTOCOL, **who(rank)}))
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, None)
        hubs[host] = (sock, seal)
    return hubs


def beat_loop(hubs: dict[int, tuple[socket.socket, Seal]], per_host: int, silence: Any,
              stop: Any, sel: selectors.BaseSelector) -> None:
    """Each hub's beat every second until ``stop``; ``silence``: a rank, or -2 - h for host
    h, or -1."""
    quiet_since: dict[int, float] = {}
    next_beat = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_beat:
            quiet = silence.value
            lost = -2 - quiet if quiet <= -2 else -1
            if quiet >= 0:  # its last beat: the tick before (as a simulated rank's own)
                quiet_since.setdefault(quiet, now - HEARTBEAT_S)
            else:
                quiet_since.clear()
            for host, (sock, seal) in hubs.items():
                if host == lost:
                    continue
                ages = [[i, round(now - quiet_since.get(host * per_host + i, now), 2)]
                        for i in range(per_host)]
                with contextlib.suppress(OSError):  # a full buffer drops this beat
                    sock.send(seal.seal("beat", a=ages, s=[]))
            next_beat = now + HEARTBEAT_S
        for key, _ in sel.select(timeout=0.1):
            with contextlib.suppress(OSError):
                key.fileobj.recv(65536)  # type: ignore[union-attr]
