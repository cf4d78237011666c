"""A rank's side of the control handshake, by hand, for tests that speak the protocol over a
real socket to a real control server (rank/events.py: hello, challenge, auth; then every
message sealed with the connection's key)."""

from __future__ import annotations

import secrets
import socket
from typing import Any

from ringtrain.rank.events import PROTOCOL, Seal, answer, encode, identity, rank_seals

_SAID: dict[str, str] = {}  # nonce -> the identity its hello said (what the proofs cover)


def read_line(sock: socket.socket, limit: int = 65536) -> bytes:
    """One line as the server sent it (b"" when it closed the connection first)."""
    line = b""
    while not line.endswith(b"\n") and len(line) < limit:
        chunk = sock.recv(1)
        if not chunk:
            return line
        line += chunk
    return line


def say_hello(sock: socket.socket, **fields: Any) -> str:
    """Send a hello with a fresh nonce (returned)."""
    nonce = secrets.token_hex(16)
    sock.sendall(encode("hello", nonce=nonce, **{"proto": PROTOCOL, **fields}))
    _SAID[nonce] = identity(fields)
    return nonce


def answer_challenge(sock: socket.socket, token: str, nonce: str) -> tuple[Seal, Seal]:
    """Read the server's challenge to the hello that carried ``nonce``: it must prove the
    token; then send this rank's auth. Returns (this rank's seal, the launcher's)."""
    line = read_line(sock)
    reply = answer(token, nonce, _SAID[nonce], line)
    assert reply is not None, "the control server's challenge did not prove the token"
    sock.sendall(reply)
    return rank_seals(token, nonce, line)


def check_in(sock: socket.socket, token: str, **fields: Any) -> Seal:
    """The whole handshake: hello, the server's challenge, this rank's auth. Returns the seal
    for this rank's messages."""
    return answer_challenge(sock, token, say_hello(sock, **fields))[0]
