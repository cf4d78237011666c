"""The remote seam: run commands on many hosts at once, one result per host.

``Remote`` is the protocol every fan-out goes through (probe, teardown, scheduler calls):
``run`` gives every host the same argv, ``run_each`` gives each host its own. ``InputRemote``,
optional, adds ``run_with_input``: the same argv and the same bytes on every host's stdin (data
that must stay out of argv: the secrets file under Gloo). ``LocalRemote``
runs argv directly on this machine; ``ringtrain.remote.ssh.SshRemote`` runs it over SSH. The fake
for unit tests (``tests/fakes.FakeRemote``) implements the same protocol.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ringtrain.hostfile.model import Host

log = logging.getLogger(__name__)

HostCommand = tuple[Host, Sequence[str]]


@dataclass(frozen=True, slots=True)
class CmdResult:
    """What one host answered. ``error`` is set when the command could not run to its end
    (unreachable, host key refused, timed out); then ``exit_code`` may be None."""

    host: str
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


class HostResults(dict[str, CmdResult]):
    """One CmdResult per host, in the order asked (a fan-out's answer), with the views a
    caller wants instead of filtering by hand, as Fabric's GroupResult gives them."""

    @property
    def failed(self) -> dict[str, CmdResult]:
        """Hosts whose command did not run to a zero exit: unreachable, refused, timed out, or
        a non-zero status."""
        return {host: r for host, r in self.items() if not r.ok}

    @property
    def succeeded(self) -> dict[str, CmdResult]:
        return {host: r for host, r in self.items() if r.ok}


class Remote(Protocol):
    """Runs commands on many hosts concurrently; one CmdResult per host, in the order given.

    ``run``: the same argv everywhere (the probe). ``run_each``: each host its own argv (the
    reaper, which gets each host's PIDs). A host's failure is its result, never an exception."""

    def run(
        self, hosts: Sequence[Host], argv: Sequence[str], timeout: float
    ) -> HostResults: ...

    def run_each(
        self, commands: Sequence[HostCommand], timeout: float
    ) -> HostResults: ...


@runtime_checkable
class InputRemote(Protocol):
    """A Remote that can also give every host the same bytes on the command's stdin, never in
    its argv. Optional: what needs it refuses a Remote without it (``isinstance``)."""

    def run_with_input(
        self, hosts: Sequence[Host], argv: Sequence[str], data: bytes, timeout: float
    ) -> HostResults: ...


class FanRemote:
    """``run``, ``run_each`` and ``run_with_input`` as one fan-out over the hosts, ``_fan``
    (SshRemote, OpenSshRemote): each host its argv, and the same stdin bytes or none."""

    def run(self, hosts: Sequence[Host], argv: Sequence[str],
            timeout: float) -> HostResults:
        return self._fan([(h, argv) for h in hosts], timeout, None)

    def run_each(self, commands: Sequence[HostCommand],
                 timeout: float) -> HostResults:
        return self._fan(commands, timeout, None)

    def run_with_input(self, hosts: Sequence[Host], argv: Sequence[str], data: bytes,
                       timeout: float) -> HostResults:
        """``argv`` on every host with ``data`` on its stdin, never in a command line that ssh,
        sshd or the remote shell see."""
        return self._fan([(h, argv) for h in hosts], timeout, data)

    def _fan(self, commands: Sequence[HostCommand], timeout: float,
             data: bytes | None) -> HostResults:
        raise NotImplementedError


class LocalRemote:
    """Runs argv directly (no shell, no SSH) for ``localhost`` hosts. ``env`` replaces the
    environment when given (tests put fake tools first on PATH this way)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env is not None else None

    def run(self, hosts: Sequence[Host], argv: Sequence[str],
            timeout: float) -> HostResults:
        return self.run_each([(h, argv) for h in hosts], timeout)

    def run_each(self, commands: Sequence[HostCommand],
                 timeout: float) -> HostResults:
        argv_of = {h.name: argv for h, argv in commands}
        return fan_out([h for h, _ in commands],
                       lambda h: self.run_one(h.name, argv_of[h.name], timeout), concurrency=8)

    def run_with_input(self, hosts: Sequence[Host], argv: Sequence[str], data: bytes,
                       timeout: float) -> HostResults:
        return fan_out(hosts, lambda h: self.run_one(h.name, argv, timeout, data),
                       concurrency=8)

    def run_one(self, name: str, argv: Sequence[str], timeout: float,
                data: bytes | None = None) -> CmdResult:
        """``data``: written to the command's stdin (else stdin is /dev/null)."""
        start = time.monotonic()
        try:
            proc = subprocess.run(list(argv), capture_output=True, timeout=timeout,
                                  env=self.env, check=False, input=data,
                                  stdin=subprocess.DEVNULL if data is None else None)
        except subprocess.TimeoutExpired:
            return _failed(name, f"timed out after {timeout:g} s", start)
        except FileNotFoundError:
            return CmdResult(name, 127, "", f"{argv[0]}: command not found",
                             f"{argv[0]}: command not found", time.monotonic() - start)
        return CmdResult(name, proc.returncode, _decode(proc.stdout), _decode(proc.stderr),
                         None, time.monotonic() - start)


def fan_out(hosts: Sequence[Host], fn: Callable[[Host], CmdResult],
            concurrency: int) -> HostResults:
    """Apply ``fn`` to every host with at most ``concurrency`` at once; results in host order."""
    if not hosts:
        return HostResults()
    workers = max(1, min(concurrency, len(hosts)))

    def guarded(host: Host) -> CmdResult:
        start = time.monotonic()
        try:
            return fn(host)
        except Exception as exc:  # one host's bug must not hide the others
            log.exception("unexpected error on %s", host.name)
            return _failed(host.name, f"unexpected error: {type(exc).__name__}: {exc}", start)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ringtrain-ssh") as pool:
        results = list(pool.map(guarded, hosts))
    return HostResults((h.name, r) for h, r in zip(hosts, results, strict=True))


def _failed(host: str, error: str, start: float) -> CmdResult:
    return CmdResult(host, None, "", "", error, time.monotonic() - start)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
