"""known_hosts files: parse, match (plain, hashed ``|1|``, wildcard, negated), append.

Pure text handling plus one appending writer; no SSH library. ``remote.py`` decides with it.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KnownHostsEntry:
    patterns: tuple[str, ...]
    key_type: str
    key_b64: str
    marker: str = ""  # "" | "@revoked" | "@cert-authority"

    def matches(self, name: str) -> bool:
        hit = False
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            if _pattern_matches(pattern.lstrip("!"), name):
                if negated:
                    return False
                hit = True
        return hit


def _pattern_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|", 3)
            mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        except ValueError:  # binascii.Error is a ValueError
            return False
        return hmac.compare_digest(base64.b64encode(mac).decode(), digest)
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(name.lower(), pattern.lower())
    return pattern.lower() == name.lower()


def parse_known_hosts(text: str) -> tuple[KnownHostsEntry, ...]:
    """Entries of an OpenSSH known_hosts file; malformed lines are skipped like ssh does."""
    entries: list[KnownHostsEntry] = []
    for raw in text.splitlines():
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else ""
        if len(fields) < 3:
            continue
        entries.append(KnownHostsEntry(tuple(fields[0].split(",")), fields[1], fields[2], marker))
    return tuple(entries)


def fingerprint(key_b64: str) -> str:
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class KnownHosts:
    """The known_hosts files for one fan-out; appends (accept-new) go to ``write_path``."""

    def __init__(self, paths: Sequence[Path], write_path: Path) -> None:
        self.paths = tuple(paths)
        self.write_path = write_path
        self._lock = threading.Lock()
        entries: list[KnownHostsEntry] = []
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                entries.extend(parse_known_hosts(path.read_text(errors="replace")))
        self._entries = entries

    def keys_for(self, names: Sequence[str]) -> tuple[KnownHostsEntry, ...]:
        with self._lock:
            return tuple(
                e for e in self._entries
                if e.marker == "" and any(e.matches(n) for n in names)
            )

    def is_revoked(self, key_b64: str) -> bool:
        with self._lock:
            return any(e.marker == "@revoked" and e.key_b64 == key_b64 for e in self._entries)

    def add(self, names: Sequence[str], key_type: str, key_b64: str) -> None:
        entry = KnownHostsEntry(tuple(names), key_type, key_b64)
        with self._lock:
            self.write_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.write_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(f"{','.join(names)} {key_type} {key_b64}\n")
            self._entries.append(entry)
        log.warning("added host key %s %s for %s to %s", key_type, fingerprint(key_b64),
                    ",".join(names), self.write_path)
