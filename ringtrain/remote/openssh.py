"""``OpenSshRemote``: the Remote seam through OpenSSH's own ``ssh`` (``--ssh-transport
openssh``), as pdsh and clush reach hosts.

Sites whose hosts trust hostbased authentication, Kerberos (GSSAPI) or CA-signed host keys
(``@cert-authority`` in known_hosts) reach them with the ``ssh`` mpirun uses; paramiko
(``SshRemote``, the default) refuses them. Here every call is that ``ssh``, one process per
host, its argv built by ``remote/sshcli.py`` (pure): strict host keys (``accept-new`` only
with ``--accept-new-host-keys``), ``BatchMode`` (never a prompt), the inventory's user, port
and key, the rest from the user's ssh_config. ``localhost`` hosts run locally unless
``ssh_localhost``, as in SshRemote. Fan-out is ``fan_out``'s, bounded by ``concurrency``;
output is capped like SshRemote's; a host past its timeout has its ssh (and only that: the
process group it leads, ProxyCommand children included) killed, and carries the timeout.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

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
from ringtrain.remote.sshcli import (
    SSH_FAILED,
    SshClient,
    describe_failure,
    path_problem,
    ssh_argv,
)
from ringtrain.remote.sshg import layered

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # per stream, as SshRemote keeps (remote/ssh.py)
_CHUNK = 4096  # at most PIPE_BUF: a write to a pipe select() calls writable never blocks


class OpenSshRemote(FanRemote):
    """SSH fan-out through the ``ssh`` program; ``localhost`` hosts run locally unless
    ``ssh_localhost``. ``env`` replaces ssh's environment when given (else it inherits this
    process's: SSH_AUTH_SOCK, KRB5CCNAME)."""

    def __init__(
        self,
        ssh_config: Path | None = None,
        known_hosts: Path | None = None,
        *,
        accept_new_host_keys: bool = False,
        connect_timeout: float = 5.0,
        concurrency: int = 64,
        ssh_localhost: bool = False,
        local: LocalRemote | None = None,
        program: str = "ssh",
        env: Mapping[str, str] | None = None,
    ) -> None:
        if concurrency < 1:
            raise RemoteError(f"SSH concurrency must be >= 1, got {concurrency}",
                              "pass a positive number")
        if ssh_config is not None and not ssh_config.is_file():
            raise RemoteError(f"ssh config {ssh_config} does not exist",
                              "pass an existing file to --ssh-config")
        if known_hosts is not None and (problem := path_problem(str(known_hosts),
                                                                "known_hosts")):
            raise RemoteError(problem, "pass --known-hosts a path without quotes or "
                              "backslashes")
        # -F the user's config then the system's, as mpirun's ssh reads them (sshg.layered)
        self.client = SshClient(layered(ssh_config) if ssh_config is not None else None,
                                known_hosts, accept_new_host_keys, connect_timeout, program)
        self.concurrency = concurrency
        self.ssh_localhost = ssh_localhost
        self.local = local or LocalRemote()
        self.env = dict(env) if env is not None else None

    def _fan(self, commands: Sequence[HostCommand], timeout: float,
             data: bytes | None) -> HostResults:
        argv_of = {h.name: argv for h, argv in commands}

        def one(host: Host) -> CmdResult:
            argv = argv_of[host.name]
            if host.is_local and not self.ssh_localhost:
                return self.local.run_one(host.name, argv, timeout, data)
            problem = host_name_problem(host.name) or (
                path_problem(host.identity_file, f"{host.name}: identity file")
                if host.identity_file else None) or (None if argv else "no command to run")
            if problem:
                return _failed(host.name, problem, time.monotonic())
            return self.run_one(host, ssh_argv(self.client, host, argv), timeout, data)

        return fan_out([h for h, _ in commands], one, self.concurrency)

    def run_one(self, host: Host, argv: Sequence[str], timeout: float,
                data: bytes | None = None) -> CmdResult:
        """Run one ssh ``argv`` for ``host``; its failure (exit 255) read into ``error``."""
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                start_new_session=True)  # its own process group: the timeout kills that alone
        except FileNotFoundError:
            return _failed(host.name, f"{argv[0]} not found: install OpenSSH's client, or "
                           "pass --ssh-transport paramiko", start)
        try:
            streams = _communicate(proc, data, start + timeout)
        finally:
            _end(proc)
        if streams is None:
            return _failed(host.name, f"timed out after {timeout:g} s", start)
        out, err = _decode(streams[0]), _decode(streams[1])
        code = proc.returncode
        error = None
        if code == SSH_FAILED:
            error = describe_failure(host, err, self.client.connect_timeout,
                                     self.client.known_hosts)
        elif code < 0:
            error = f"ssh ended by signal {-code}"
        return CmdResult(host.name, code if code >= 0 else None, out, err, error,
                         time.monotonic() - start)


def _communicate(proc: subprocess.Popen[bytes], data: bytes | None,
                 deadline: float) -> tuple[bytes, bytes] | None:
    """``data`` to stdin, stdout and stderr read (each kept up to MAX_OUTPUT_BYTES, the rest
    drained) until ssh exits; None when ``deadline`` passes first."""
    assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
    kept = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    pending = memoryview(data or b"")
    with selectors.DefaultSelector() as sel:
        for fd in kept:
            sel.register(fd, selectors.EVENT_READ)
        if proc.stdin is not None:
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for key, _ in sel.select(remaining):
                fd = int(key.fd)
                if fd in kept:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        sel.unregister(fd)
                    kept[fd] += chunk[: MAX_OUTPUT_BYTES - len(kept[fd])]
                    continue
                try:
                    pending = pending[os.write(fd, pending[:_CHUNK]):]
                except BrokenPipeError:  # ssh is gone; its exit status says why
                    pending = pending[:0]
                if not pending:
                    sel.unregister(fd)
                    _close(proc.stdin)
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        return None
    return bytes(kept[proc.stdout.fileno()]), bytes(kept[proc.stderr.fileno()])


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill ssh's own process group if ssh was not reaped yet (a zombie still holds its
    group id, so the signal cannot reach anyone else's), then reap it and close its pipes."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        _close(stream)


def _close(stream: object) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        with contextlib.suppress(OSError):
            close()
