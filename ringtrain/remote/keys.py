"""known_hosts files: parse, match (plain, hashed ``|1|``, wildcard, negated), append.

Pure text handling plus one appending writer; no SSH library. ``ssh.py`` decides with it.
``@cert-authority`` lines are kept with their file and line: paramiko cannot verify a host
certificate, so a host trusted only through one is refused with a pointer to
``--ssh-transport openssh`` (``cert_authority``).
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
    return tuple(entry for _, entry in _numbered_entries(text))


def _numbered_entries(text: str) -> list[tuple[int, KnownHostsEntry]]:
    """(line number from 1, entry) for each well-formed line."""
    entries: list[tuple[int, KnownHostsEntry]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else ""
        if len(fields) < 3:
            continue
        entries.append((number, KnownHostsEntry(tuple(fields[0].split(",")), fields[1],
                                                fields[2], marker)))
    return entries


def fingerprint(key_b64: str) -> str:
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class KnownHosts:
    """The known_hosts files for one fan-out; appends (accept-new) go to ``write_path``.

    Entries whose patterns are all plain names are indexed by name, so looking a host up costs
    the same with 10 entries or 10,000 (a generated file has one per host; scanning it for every
    host made a 1,000-host fan-out quadratic). Hashed, wildcard and negated entries are scanned.
    """

    def __init__(self, paths: Sequence[Path], write_path: Path) -> None:
        self.paths = tuple(paths)
        self.write_path = write_path
        self._lock = threading.Lock()
        self._entries: list[KnownHostsEntry] = []
        self._by_name: dict[str, list[int]] = {}
        self._scanned: list[int] = []
        self._revoked: set[str] = set()
        self._authorities: list[tuple[KnownHostsEntry, Path, int]] = []  # @cert-authority
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                for number, entry in _numbered_entries(path.read_text(errors="replace")):
                    if entry.marker == "@cert-authority":
                        self._authorities.append((entry, path, number))
                    self._append(entry)

    def _append(self, entry: KnownHostsEntry) -> None:
        index = len(self._entries)
        self._entries.append(entry)
        if entry.marker == "@revoked":
            self._revoked.add(entry.key_b64)
        if entry.marker:
            return
        if any(p.startswith(("!", "|")) or "*" in p or "?" in p for p in entry.patterns):
            self._scanned.append(index)
            return
        for pattern in {p.lower() for p in entry.patterns}:
            self._by_name.setdefault(pattern, []).append(index)

    def keys_for(self, names: Sequence[str]) -> tuple[KnownHostsEntry, ...]:
        """The usable (unmarked) entries for any of ``names``, in file order."""
        with self._lock:
            hits = {i for n in names for i in self._by_name.get(n.lower(), ())}
            hits.update(i for i in self._scanned
                        if any(self._entries[i].matches(n) for n in names))
            return tuple(self._entries[i] for i in sorted(hits))

    def cert_authority(self, names: Sequence[str], alias: str) -> str | None:
        """The refusal for a host with no plain key that a ``@cert-authority`` line covers
        (paramiko sees the plain key of a CA-signed host, never the certificate); None when
        the host has a plain key or no such line matches ``names``."""
        if self.keys_for(names):
            return None
        for entry, path, number in self._authorities:  # read-only after __init__
            if any(entry.matches(n) for n in names):
                return (f"{alias}: this host's key is CA-signed (@cert-authority in {path} "
                        f"line {number}): paramiko cannot verify host certificates; pass "
                        "--ssh-transport openssh")
        return None

    def is_revoked(self, key_b64: str) -> bool:
        with self._lock:
            return key_b64 in self._revoked

    def add(self, names: Sequence[str], key_type: str, key_b64: str) -> None:
        entry = KnownHostsEntry(tuple(names), key_type, key_b64)
        with self._lock:
            self.write_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.write_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(f"{','.join(names)} {key_type} {key_b64}\n")
            self._append(entry)
        log.warning("added host key %s %s for %s to %s", key_type, fingerprint(key_b64),
                    ",".join(names), self.write_path)
