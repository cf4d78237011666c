"""``SshRemote``: the Remote seam over SSH (paramiko), with strict host keys.

With ``remote/keys.py``, the only module that imports paramiko. Every host is tried; a host
that cannot be reached carries its reason in ``CmdResult.error`` and the others still run
(like Fabric's GroupResult).

Host keys are checked the way OpenSSH's ``StrictHostKeyChecking yes`` does: the key must be in
a known_hosts file under the alias, the HostName or HostKeyAlias (``[name]:port`` off port 22).
``accept_new_host_keys`` is OpenSSH's ``accept-new``: a host with no known key is trusted on
first use and appended to the user's known_hosts; a *changed* key is refused, always. Fabric is
not used for connections because it hard-codes AutoAddPolicy.
"""

from __future__ import annotations

import os
import select
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from ringtrain.errors import RemoteError
from ringtrain.hostfile.model import Host, host_name_problem
from ringtrain.remote.base import (
    CmdResult,
    HostCommand,
    HostResults,
    LocalRemote,
    _decode,
    _failed,
    fan_out,
)
from ringtrain.remote.keys import KnownHosts, KnownHostsEntry, fingerprint

MAX_OUTPUT_BYTES = 8 * 1024 * 1024
_RSA_SHA2 = ("rsa-sha2-512", "rsa-sha2-256")


# --------------------------------------------------------------------------- ssh_config


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
        """Names looked up in known_hosts, as OpenSSH writes them."""
        names: tuple[str, ...] = (
            (self.host_key_alias,) if self.host_key_alias else (self.alias, self.hostname))
        if self.port != 22:
            names = tuple(f"[{n}]:{self.port}" for n in names)
        return tuple(dict.fromkeys(names))


def resolve_target(
    host: Host,
    config: paramiko.SSHConfig | IndexedSshConfig,
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
        kh_files += (Path("/etc/ssh/ssh_known_hosts"),)
    strict_cfg = str(opts.get("stricthostkeychecking", "yes")).lower()
    identity = (host.identity_file,) if host.identity_file else tuple(
        os.path.expanduser(p) for p in opts.get("identityfile", []))
    return SshTarget(
        alias=host.name,
        hostname=str(opts.get("hostname", host.name)),
        port=host.port or int(opts.get("port", 22)),
        user=host.user or opts.get("user"),
        identity_files=identity,
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        known_hosts_files=kh_files,
        # "no"/"off" are read as accept-new: a changed key is refused whatever the config says.
        strict="accept-new" if accept_new or strict_cfg in ("accept-new", "no", "off")
        else "yes",
        connect_timeout=float(opts.get("connecttimeout", connect_timeout)),
        proxy_command=opts.get("proxycommand") if opts.get("proxycommand", "none") != "none"
        else None,
        proxy_jump=opts.get("proxyjump"),
        host_key_alias=opts.get("hostkeyalias"),
    )


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


# --------------------------------------------------------------------------- host keys


class _KeyRefused(paramiko.SSHException):
    pass


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Decides on the server's key. The client holds no keys itself, so paramiko always asks."""

    def __init__(self, store: KnownHosts, target: SshTarget) -> None:
        self.store = store
        self.target = target

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        t, names = self.target, self.target.key_names
        key_type, key_b64 = key.get_name(), key.get_base64()
        if self.store.is_revoked(key_b64):
            raise _KeyRefused(f"host key for {t.alias} is marked @revoked in known_hosts")
        known = self.store.keys_for(names)
        if any(e.key_type == key_type and e.key_b64 == key_b64 for e in known):
            return
        where = self.store.paths[0] if self.store.paths else "known_hosts"
        if known:
            raise _KeyRefused(
                f"host key for {t.alias} CHANGED (possible MITM): fix known_hosts: the server "
                f"offers {key_type} {fingerprint(key_b64)}, {where} has another; if the host "
                f"was reinstalled run `ssh-keygen -f {where} -R {shlex.quote(names[0])}`")
        if t.strict != "accept-new" and (ca := self.store.cert_authority(names, t.alias)):
            raise _KeyRefused(ca)
        if t.strict != "accept-new":
            raise _KeyRefused(
                f"unknown host key for {t.alias} ({key_type} {fingerprint(key_b64)}): add it "
                f"with `ssh-keyscan -p {t.port} {t.hostname} >> {where}` after checking the "
                "fingerprint, or pass --accept-new-host-keys")
        self.store.add(names, key_type, key_b64)


def _disabled_host_key_types(known: Sequence[KnownHostsEntry]) -> list[str]:
    """Make the server offer a key type we know (OpenSSH orders HostKeyAlgorithms likewise)."""
    allowed = {e.key_type for e in known}
    if "ssh-rsa" in allowed:
        allowed.update(_RSA_SHA2)
    offered: tuple[str, ...] = tuple(getattr(paramiko.Transport, "_preferred_keys", ()))
    if not allowed & set(offered):
        return []
    return [k for k in offered if k not in allowed]


# --------------------------------------------------------------------------- running


class SshRemote:
    """SSH fan-out with strict host keys; ``localhost`` hosts run locally unless
    ``ssh_localhost``. Connections are made fresh per ``run`` and closed after it."""

    def __init__(
        self,
        ssh_config: Path | None = None,
        known_hosts: Path | None = None,
        *,
        accept_new_host_keys: bool = False,
        connect_timeout: float = 5.0,
        keepalive: int = 5,
        concurrency: int = 64,
        ssh_localhost: bool = False,
        local: LocalRemote | None = None,
    ) -> None:
        if concurrency < 1:
            raise RemoteError(f"SSH concurrency must be >= 1, got {concurrency}",
                              "pass a positive number")
        self.config = IndexedSshConfig(load_ssh_config(ssh_config))
        self.known_hosts = known_hosts
        self.accept_new = accept_new_host_keys
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.concurrency = concurrency
        self.ssh_localhost = ssh_localhost
        self.local = local or LocalRemote()

    def target(self, host: Host) -> SshTarget:
        return resolve_target(host, self.config, known_hosts=self.known_hosts,
                              accept_new=self.accept_new, connect_timeout=self.connect_timeout)

    def run(self, hosts: Sequence[Host], argv: Sequence[str],
            timeout: float) -> HostResults:
        return self.run_each([(h, argv) for h in hosts], timeout)

    def run_each(self, commands: Sequence[HostCommand],
                 timeout: float) -> HostResults:
        return self._fan(commands, timeout, None)

    def run_with_input(self, hosts: Sequence[Host], argv: Sequence[str], data: bytes,
                       timeout: float) -> HostResults:
        """``argv`` on every host with ``data`` on its stdin (sent over the channel, never in
        the command line the remote sshd and shell see)."""
        return self._fan([(h, argv) for h in hosts], timeout, data)

    def _fan(self, commands: Sequence[HostCommand], timeout: float,
             data: bytes | None) -> HostResults:
        argv_of = {h.name: argv for h, argv in commands}
        targets: dict[str, SshTarget | str] = {}
        stores: dict[tuple[Path, ...], KnownHosts] = {}
        for host, _argv in commands:  # resolved up front so threads share one store per file set
            if host.is_local and not self.ssh_localhost:
                continue
            problem = host_name_problem(host.name)
            try:
                targets[host.name] = problem or self.target(host)
            except (ValueError, paramiko.SSHException) as err:
                targets[host.name] = f"cannot apply the ssh config to {host.name}: {err}"
            resolved = targets[host.name]
            if isinstance(resolved, SshTarget) and resolved.known_hosts_files not in stores:
                files = resolved.known_hosts_files
                stores[files] = KnownHosts(files, files[0])

        def one(host: Host) -> CmdResult:
            argv = argv_of[host.name]
            if host.name not in targets:
                return self.local.run_one(host.name, argv, timeout, data)
            target = targets[host.name]
            if isinstance(target, str):
                return _failed(host.name, target, time.monotonic())
            return self._run_one(target, shlex.join(argv), timeout,
                                 stores[target.known_hosts_files], data)

        return fan_out([h for h, _ in commands], one, self.concurrency)

    def _run_one(self, target: SshTarget, command: str, timeout: float,
                 store: KnownHosts, data: bytes | None = None) -> CmdResult:
        start = time.monotonic()
        if target.proxy_jump and not target.proxy_command:
            return _failed(target.alias, "ProxyJump is not supported: use ProxyCommand "
                           "`ssh -W %h:%p JUMPHOST` in the ssh config", start)
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_HostKeyPolicy(store, target))
        try:
            self._connect(client, target, store)
            transport = client.get_transport()
            if transport is None:  # pragma: no cover - connect() sets it or raises
                return _failed(target.alias, "SSH transport missing after connect", start)
            transport.set_keepalive(self.keepalive)
            code, out, err = _exec(transport, command, start + timeout, data)
        except Exception as exc:  # every failure becomes this host's error
            return _failed(target.alias, describe_error(exc, target, timeout), start)
        finally:
            client.close()
        error = None if code is not None else "remote command ended without an exit status"
        return CmdResult(target.alias, code, out, err, error, time.monotonic() - start)

    def _connect(self, client: paramiko.SSHClient, target: SshTarget,
                 store: KnownHosts) -> None:
        sock = None
        if target.proxy_command:
            sock = paramiko.ProxyCommand(target.proxy_command)
        client.connect(
            target.hostname, port=target.port, username=target.user,
            key_filename=list(target.identity_files) or None,  # type: ignore[arg-type]
            timeout=target.connect_timeout, banner_timeout=target.connect_timeout,
            auth_timeout=target.connect_timeout * 2,
            allow_agent=not target.identities_only, look_for_keys=not target.identities_only,
            sock=sock,
            disabled_algorithms={"keys": _disabled_host_key_types(
                store.keys_for(target.key_names))},
        )


def _exec(transport: paramiko.Transport, command: str, deadline: float,
          data: bytes | None = None) -> tuple[int | None, str, str]:
    chan = transport.open_session(timeout=max(deadline - time.monotonic(), 0.1))
    try:
        chan.exec_command(command)
        if data is not None:  # small (a secrets file): well inside the channel's window
            chan.settimeout(max(deadline - time.monotonic(), 0.1))
            chan.sendall(data)
            chan.shutdown_write()
            chan.settimeout(None)
        out, err = bytearray(), bytearray()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("command deadline")
            select.select([chan], [], [], min(remaining, 1.0))
            while chan.recv_ready():
                out += chan.recv(65536)[: MAX_OUTPUT_BYTES - len(out)]
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)[: MAX_OUTPUT_BYTES - len(err)]
            if chan.exit_status_ready() and chan.eof_received and not (
                    chan.recv_ready() or chan.recv_stderr_ready()):
                break
        status = chan.recv_exit_status()
        return (status if status >= 0 else None), _decode(bytes(out)), _decode(bytes(err))
    finally:
        chan.close()


def describe_error(  # noqa: PLR0911 - one return per kind of failure
    exc: BaseException, target: SshTarget, timeout: float
) -> str:
    """One line, phrased for the user, for anything that stopped a host's command."""
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, _KeyRefused):
        return str(exc)
    if isinstance(exc, paramiko.BadHostKeyException):  # pragma: no cover - policy decides
        return f"host key for {target.alias} CHANGED (possible MITM): fix known_hosts"
    if isinstance(exc, paramiko.AuthenticationException):
        return (f"authentication failed for {target.user or 'the current user'}@{target.alias}:"
                " check IdentityFile, ssh-agent and authorized_keys")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused by {where} (is sshd running?)"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where} (is sshd running?)"
    if isinstance(exc, TimeoutError) and str(exc) == "command deadline":
        return f"timed out after {timeout:g} s"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"timed out after {target.connect_timeout:g} s connecting to {where}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host name {target.hostname}: {exc.strerror}"
    if isinstance(exc, FileNotFoundError):
        return f"identity file not found: {exc.filename}"
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
        return f"timed out after {target.connect_timeout:g} s waiting for the SSH banner of {where}"
    if isinstance(exc, paramiko.SSHException | EOFError):
        return f"SSH error with {where}: {exc or type(exc).__name__}"
    if isinstance(exc, OSError):
        return f"cannot connect to {where}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"
