"""Where and how to reach each host: ``SshTarget``, resolved from the ssh config.

Two readers of the ssh config give ``resolve_target`` its options: ``OpenSshConfig``
(``remote/sshg.py``: ``ssh -G``, OpenSSH's own answer, the default where ``ssh`` is installed,
so the probe reaches each host exactly as mpirun's ssh will) and ``IndexedSshConfig``
(paramiko's reader, indexed; used where there is no ``ssh`` binary). Inventory coordinates
(user, port, identity file) win over either, like ssh's command line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paramiko

from ringtrain.errors import RemoteError
from ringtrain.hostfile.model import Host, host_name_problem


class SshOptions(Protocol):
    def lookup(self, hostname: str) -> Any: ...



@dataclass(frozen=True, slots=True)
class SshTarget:
    """Where and how to reach one inventory host, after ssh_config and inventory overrides."""

    alias: str
    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    identities_only: bool
    known_hosts_files: tuple[Path, ...]
    strict: str  # "yes" | "accept-new"
    connect_timeout: float
    proxy_command: str | None = None
    proxy_jump: str | None = None
    host_key_alias: str | None = None

    @property
    def key_names(self) -> tuple[str, ...]:
        """Names looked up in known_hosts, as OpenSSH looks them up and writes them: the
        HostKeyAlias, else the HostName (never the alias the inventory uses, which OpenSSH,
        and so mpirun's ssh, does not look up)."""
        names: tuple[str, ...] = (self.host_key_alias or self.hostname,)
        if self.port != 22:
            names = tuple(f"[{n}]:{self.port}" for n in names)
        return tuple(dict.fromkeys(names))


def resolve_target(
    host: Host,
    config: SshOptions,
    *,
    known_hosts: Path | None = None,
    accept_new: bool = False,
    connect_timeout: float = 5.0,
) -> SshTarget:
    """Merge inventory coordinates (they win, like ssh's command line) with ssh_config."""
    opts = config.lookup(host.name)
    user_files = tuple(Path(os.path.expanduser(p)) for p in
                       str(opts.get("userknownhostsfile", "")).split() if p.lower() != "none")
    if known_hosts is not None:
        kh_files: tuple[Path, ...] = (known_hosts,)
    else:
        home = Path("~/.ssh").expanduser()
        kh_files = user_files or (home / "known_hosts", home / "known_hosts2")
        global_files = str(opts.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts")).split()
        kh_files += tuple(Path(p) for p in global_files if p.lower() != "none")
    strict_cfg = str(opts.get("stricthostkeychecking", "yes")).lower()
    identity = (host.identity_file,) if host.identity_file else _identities(
        opts.get("identityfile", []), only_existing=bool(opts.get("_openssh")))
    return SshTarget(
        alias=host.name,
        hostname=str(opts.get("hostname", host.name)),
        port=host.port or int(opts.get("port", 22)),
        user=host.user or opts.get("user"),
        identity_files=identity,
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        known_hosts_files=kh_files,
        # "no"/"off" are read as accept-new: a changed key is refused whatever the config says
        # (`ssh -G` prints both as "false", so that too)
        strict="accept-new" if accept_new or strict_cfg in ("accept-new", "no", "off", "false")
        else "yes",
        connect_timeout=float(opts.get("connecttimeout", connect_timeout)),
        proxy_command=opts.get("proxycommand") if opts.get("proxycommand", "none") != "none"
        else None,
        proxy_jump=opts.get("proxyjump"),
        host_key_alias=opts.get("hostkeyalias"),
    )


def _identities(files: Any, *, only_existing: bool) -> tuple[str, ...]:
    """IdentityFile paths, ``~`` expanded. ``ssh -G`` lists OpenSSH's defaults (~/.ssh/id_rsa,
    ...) whether or not they exist, and OpenSSH skips the missing ones: so does the probe."""
    paths = tuple(os.path.expanduser(str(p)) for p in files)
    return tuple(p for p in paths if Path(p).is_file()) if only_existing else paths


class IndexedSshConfig:
    """paramiko's SSHConfig, looked up at O(stanzas that can match) instead of O(stanzas).

    paramiko tries every stanza for every host (and asks the OS for the user name at each
    one), so a config with a ``Host`` stanza per host made resolving 1,000 hosts take ~1 s per
    100 hosts, quadratic (bench/launcher/scale.py; 10 of 15 s of a 400-host probe). Stanzas whose
    ``Host`` patterns are all plain names are indexed by name; the others (wildcards,
    negations, ``Match``) are tried for every host as before. A host is looked up in a config
    holding only its candidate stanzas, in file order, so the first-value-wins rules are
    paramiko's own. Where canonicalization may rename the host between passes, every lookup
    uses the whole config."""

    def __init__(self, config: paramiko.SSHConfig) -> None:
        self.config = config
        self._entries: list[dict[str, Any]] = list(getattr(config, "_config", []))
        self._by_name: dict[str, list[int]] = {}
        self._always: list[int] = []
        self._plain = not self._entries or any(
            "canonicalizehostname" in e.get("config", {}) for e in self._entries)
        for i, entry in enumerate(self._entries):
            patterns = entry.get("host") or []
            if patterns and not entry.get("matches") and all(
                    not set(p) & set("*?![") for p in patterns):
                for p in patterns:
                    self._by_name.setdefault(p, []).append(i)
            else:
                self._always.append(i)

    def lookup(self, hostname: str) -> Any:
        if self._plain:
            return self.config.lookup(hostname)
        chosen = sorted({*self._always, *self._by_name.get(hostname, ())})
        sub = paramiko.SSHConfig()
        sub._config = [self._entries[i] for i in chosen]  # type: ignore[attr-defined]
        return sub.lookup(hostname)


def load_ssh_config(path: Path | None) -> paramiko.SSHConfig:
    """``-F FILE`` when given (must exist), else ~/.ssh/config when present, else empty."""
    if path is None:
        default = Path("~/.ssh/config").expanduser()
        if not default.is_file():
            return paramiko.SSHConfig()
        path = default
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except FileNotFoundError as err:
        raise RemoteError(f"ssh config {path} does not exist",
                          "pass an existing file to --ssh-config") from err
    except (OSError, paramiko.SSHException, ValueError) as err:
        raise RemoteError(f"cannot read ssh config {path}: {err}",
                          "fix the file; `ssh -G HOST -F FILE` shows how OpenSSH reads it") from err




_HOP_RE = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@/:\s]+)@)?"
                     r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^@/:\[\]\s]+))"
                     r"(?::(?P<port>\d{1,5}))?/?$")


def parse_jump(spec: str) -> tuple[Host, ...]:
    """ProxyJump's ``[user@]host[:port]`` hops (``ssh://`` URIs too), first hop first, as
    Hosts; ValueError naming the hop that is not one (pure)."""
    hops = []
    for part in spec.split(","):
        m = _HOP_RE.match(part.strip())
        name = m and (m.group("host") or m.group("v6"))
        problem = host_name_problem(name) if name else "not [user@]host[:port]"
        if m is None or not name or problem:
            raise ValueError(f"ProxyJump hop {part.strip()!r}: {problem}")
        port = int(m.group("port")) if m.group("port") else None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"ProxyJump hop {part.strip()!r}: port {port} is out of range")
        hops.append(Host(name, 1, user=m.group("user"), port=port))
    return tuple(hops)
