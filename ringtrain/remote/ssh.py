"""``SshRemote``: the Remote seam over SSH (paramiko), with strict host keys.

With ``remote/keys.py`` and ``remote/targets.py``, the only modules that import paramiko.
Settings come from OpenSSH (``ssh -G``, remote/sshg.py) where ``ssh`` is installed; ProxyJump
hops are reached through each other, as ``ssh -J`` does. Every host is tried; a host
that cannot be reached carries its reason in ``CmdResult.error`` and the others still run
(like Fabric's GroupResult).

Host keys are checked the way OpenSSH's ``StrictHostKeyChecking yes`` does: the key must be in
a known_hosts file under the HostKeyAlias, else the HostName (``[name]:port`` off port 22).
``accept_new_host_keys`` is OpenSSH's ``accept-new``: a host with no known key is trusted on
first use and appended to the user's known_hosts; a *changed* key is refused, always. Fabric is
not used for connections: Fabric 3's Connection sets AutoAddPolicy on every client
(docs/PREFLIGHT.md).
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import shutil
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import paramiko

from ringtrain.errors import RemoteError
from ringtrain.hostfile.model import Host, host_name_problem
from ringtrain.remote.base import (
    CmdResult,
    FanRemote,
    HostCommand,
    HostResults,
    LocalRemote,
    _decode,
    _failed,
    fan_out,
)
from ringtrain.remote.keys import KnownHosts, KnownHostsEntry, fingerprint
from ringtrain.remote.sshg import OpenSshConfig
from ringtrain.remote.targets import (
    IndexedSshConfig,
    SshOptions,
    SshTarget,
    load_ssh_config,
    parse_jump,
    resolve_target,
)

__all__ = ["IndexedSshConfig", "SshRemote", "SshTarget", "describe_error", "resolve_target"]
log = logging.getLogger(__name__)

MAX_OUTPUT_BYTES = 8 * 1024 * 1024
_RSA_SHA2 = ("rsa-sha2-512", "rsa-sha2-256")


# --------------------------------------------------------------------------- host keys


class _KeyRefused(paramiko.SSHException):
    pass


class JumpFailed(paramiko.SSHException):
    """A ProxyJump hop could not be reached: the message names the hop."""


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


def ssh_options(path: Path | None) -> SshOptions:
    """OpenSSH's answer (``ssh -G``) where ``ssh`` is installed, else paramiko's reader."""
    if path is not None and not path.exists():
        raise RemoteError(f"ssh config {path} does not exist",
                          "pass an existing file to --ssh-config")
    ssh = shutil.which("ssh")
    if ssh is not None:
        return OpenSshConfig(path, ssh)
    log.info("no ssh binary here: reading the ssh config with paramiko (no Include, no "
             "/etc/ssh/ssh_config)")
    return IndexedSshConfig(load_ssh_config(path))


class SshRemote(FanRemote):
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
        self.config = ssh_options(ssh_config)
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

    def _fan(self, commands: Sequence[HostCommand], timeout: float,
             data: bytes | None) -> HostResults:
        argv_of = {h.name: argv for h, argv in commands}
        targets: dict[str, SshTarget | str] = {}
        stores: dict[tuple[Path, ...], KnownHosts] = {}
        if isinstance(self.config, OpenSshConfig):  # one ssh -G per host, in parallel
            self.config.prefetch([h.name for h, _ in commands if not host_name_problem(h.name)
                                  and (self.ssh_localhost or not h.is_local)])
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
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_HostKeyPolicy(store, target))
        hops: list[paramiko.SSHClient] = []
        try:
            sock = self._through_jumps(target, hops) if (
                target.proxy_jump and not target.proxy_command) else None
            self._connect(client, target, store, sock)
            transport = client.get_transport()
            if transport is None:  # pragma: no cover - connect() sets it or raises
                return _failed(target.alias, "SSH transport missing after connect", start)
            transport.set_keepalive(self.keepalive)
            code, out, err = _exec(transport, command, start + timeout, data)
        except Exception as exc:  # every failure becomes this host's error
            return _failed(target.alias, describe_error(exc, target, timeout), start)
        finally:
            client.close()
            for hop in reversed(hops):
                hop.close()
        error = None if code is not None else "remote command ended without an exit status"
        return CmdResult(target.alias, code, out, err, error, time.monotonic() - start)

    def _through_jumps(self, target: SshTarget,
                       hops: list[paramiko.SSHClient]) -> paramiko.Channel:
        """ProxyJump, as ``ssh -J`` does it: each hop (its own settings from the same config,
        its host key checked like any host's) reached through the one before, and from the
        last a ``direct-tcpip`` channel to the target's HostName and port."""
        sock: paramiko.Channel | None = None
        chain = [resolve_target(hop, self.config, known_hosts=self.known_hosts,
                                accept_new=self.accept_new,
                                connect_timeout=self.connect_timeout)
                 for hop in parse_jump(target.proxy_jump or "")]
        for hop, after in zip(chain, [*chain[1:], target], strict=True):
            client = paramiko.SSHClient()
            hops.append(client)
            store = KnownHosts(hop.known_hosts_files, hop.known_hosts_files[0])
            client.set_missing_host_key_policy(_HostKeyPolicy(store, hop))
            try:
                self._connect(client, hop, store, sock)
            except Exception as exc:
                raise JumpFailed(f"jump host {hop.alias}: {describe_error(exc, hop, 0)}") from exc
            transport = client.get_transport()
            assert transport is not None  # connect() sets it or raises
            sock = transport.open_channel("direct-tcpip", (after.hostname, after.port),
                                          ("127.0.0.1", 0), timeout=target.connect_timeout)
        assert sock is not None  # parse_jump gives at least one hop
        return sock

    def _connect(self, client: paramiko.SSHClient, target: SshTarget,
                 store: KnownHosts, sock: paramiko.Channel | None = None) -> None:
        if target.proxy_command:
            sock = PolledProxyCommand(target.proxy_command)  # type: ignore[assignment]
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


class PolledProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, its output waited for with poll: paramiko's own waits with
    select(), which takes no descriptor past 1,024 (a launcher supervising thousands of ranks
    holds more), and then every host behind a ProxyCommand "timed out" at its banner."""

    def recv(self, size: int) -> bytes:
        fd = self.process.stdout.fileno()  # type: ignore[union-attr]
        ready = select.poll()
        ready.register(fd, select.POLLIN)
        start, got = time.monotonic(), b""
        try:
            while len(got) < size:
                wait = None
                if self.timeout is not None:
                    left = self.timeout - (time.monotonic() - start)
                    if left <= 0:
                        if got:
                            return got  # a partial read, as a socket's
                        raise TimeoutError()
                    wait = left * 1000
                if ready.poll(wait):
                    chunk = os.read(fd, size - len(got))
                    if not chunk:  # the command ended: end of stream, as a socket says it
                        return got
                    got += chunk
            return got
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd),
                                               exc.strerror or str(exc)) from exc


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
        # poll, not select: a launcher supervising thousands of ranks holds a descriptor for
        # each, and select() takes none past 1,024 (ValueError: every host "failed")
        ready = select.poll()
        ready.register(chan, select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("command deadline")
            ready.poll(min(remaining, 1.0) * 1000)
            while chan.recv_ready():
                out += chan.recv(65536)[: MAX_OUTPUT_BYTES - len(out)]
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)[: MAX_OUTPUT_BYTES - len(err)]
            # done: the exit status and the end of output came, or the connection is gone
            # (then no end of output comes, and its pipe stays readable: no spin until the
            # deadline)
            if chan.exit_status_ready() and (chan.eof_received or chan.closed) and not (
                    chan.recv_ready() or chan.recv_stderr_ready()):
                break
        status = chan.recv_exit_status()
        return (status if status >= 0 else None), _decode(bytes(out)), _decode(bytes(err))
    finally:
        chan.close()


def _auth_failed(exc: paramiko.AuthenticationException, target: SshTarget) -> str:
    who = f"{target.user or 'the current user'}@{target.alias}"
    allowed = [str(t) for t in getattr(exc, "allowed_types", None) or ()]
    if allowed and not {"publickey", "password"} & set(allowed):
        # hostbased, GSSAPI (Kerberos), keyboard-interactive: paramiko cannot answer them here
        return (f"authentication failed for {who}: the host accepts only "
                f"{', '.join(allowed[:4])}, which ringtrain's paramiko transport does not do; "
                "pass --ssh-transport openssh (the system's ssh)")
    return f"authentication failed for {who}: check IdentityFile, ssh-agent and authorized_keys"


def describe_error(  # noqa: PLR0911 - one return per kind of failure
    exc: BaseException, target: SshTarget, timeout: float
) -> str:
    """One line, phrased for the user, for anything that stopped a host's command."""
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, _KeyRefused | JumpFailed | ValueError):  # ValueError: a bad ProxyJump
        return str(exc)
    if isinstance(exc, paramiko.BadHostKeyException):  # pragma: no cover - policy decides
        return f"host key for {target.alias} CHANGED (possible MITM): fix known_hosts"
    if isinstance(exc, paramiko.AuthenticationException):
        return _auth_failed(exc, target)
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
