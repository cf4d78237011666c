"""The inventory model: hosts with slots, labels and SSH coordinates. Pure, immutable."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace

# RFC 1123 labels; underscores are tolerated because real clusters use them in short names.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME_RE = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?\Z")
_LABEL_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:/+@-]{0,128}\Z")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?\Z", re.IGNORECASE)
_ZONE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}\Z")
_GROUP_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def host_name_problem(name: str) -> str | None:
    """Why ``name`` is not a safe host name, IPv4 or IPv6 address; None when it is fine.

    Names reach ssh and mpirun argv, so anything outside the grammar is refused, not quoted.
    """
    if not name:
        return "empty host name"
    if len(name) > 253:
        return f"host name longer than 253 characters ({len(name)})"
    if ":" in name:
        return _ipv6_problem(name)
    if name.startswith("-"):
        return f"host name {name!r} starts with '-' and would be read as an option"
    return None if _HOSTNAME_RE.match(name) else _grammar_problem(name)


def _grammar_problem(name: str) -> str:
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
    if bad:
        shown = " ".join(repr(c) for c in bad)
        return f"host name {name!r} contains characters not allowed in host names: {shown}"
    return f"{name!r} is not a valid host name (labels of 1-63 letters, digits, '-' or '_')"


def _ipv6_problem(name: str) -> str | None:
    address, pct, zone = name.partition("%")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return f"{name!r} is neither a host name nor an IPv6 address"
    if pct and not _ZONE_RE.match(zone):
        return f"IPv6 zone {zone!r} in {name!r} must be an interface name or number"
    return None


def label_problem(key: str, value: str) -> str | None:
    if not _LABEL_KEY_RE.match(key):
        return f"label key {key!r} must match {_LABEL_KEY_RE.pattern}"
    if not _LABEL_VALUE_RE.match(value):
        return f"label {key}={value!r} has characters outside {_LABEL_VALUE_RE.pattern}"
    return None


def user_problem(user: str) -> str | None:
    if not _USER_RE.match(user):
        return f"SSH user {user!r} is not a valid user name"
    return None


def group_problem(name: str) -> str | None:
    if not _GROUP_RE.match(name):
        return f"group name {name!r} must match {_GROUP_RE.pattern}"
    return None


def port_problem(port: int) -> str | None:
    if not 1 <= port <= 65535:
        return f"SSH port {port} is outside 1-65535"
    return None


def identity_file_problem(path: str) -> str | None:
    """Identity files reach ssh argv as one word: printable text, not an option."""
    if not path:
        return "empty identity_file"
    if len(path) > 4096:
        return f"identity_file longer than 4096 characters ({len(path)})"
    if not path.isprintable():
        return f"identity_file {path!r} contains control or non-printable characters"
    if path.startswith("-"):
        return f"identity_file {path!r} starts with '-' and would be read as an option"
    return None


@dataclass(frozen=True, slots=True)
class Host:
    """One host of an inventory.

    ``slots`` is how many ranks the inventory offers on it (on GPU hosts, one per GPU; 0 only
    from ``-H host:0``, a host listed but given no rank, as horovodrun reads it);
    ``max_slots`` the hard limit Open MPI may oversubscribe to (None: same as slots);
    ``address`` where the other hosts reach this one for the job's own traffic (TensorFlow's
    cluster spec), when that is not its name: Slurm's NodeAddr (None: the name).
    """

    name: str
    slots: int
    max_slots: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    local: bool = False  # a name of the launching machine (set by launch/job/hosts.py): no SSH
    address: str | None = None

    def label(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return default

    def with_slots(self, slots: int) -> Host:
        return replace(self, slots=slots)

    @property
    def is_local(self) -> bool:
        return self.local or self.name in ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Inventory:
    """The hosts a source offers, in source order. ``source`` names where they came from."""

    hosts: tuple[Host, ...]
    source: str = "<inline>"
    format: str = ""
    groups: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    @property
    def total_slots(self) -> int:
        return sum(h.slots for h in self.hosts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def is_local_only(self) -> bool:
        return all(h.is_local for h in self.hosts)

    def group_of(self, name: str) -> str | None:
        """The inventory group (YAML/TOML ``groups``) that lists ``name``, if any."""
        for group, members in self.groups:
            if name in members:
                return group
        return None
