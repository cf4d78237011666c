"""What every command gets from the ``ringtrain`` group: the remote factory (the SSH seam).

Commands build their Remote through ``remote_factory`` instead of naming SshRemote, so a test
hands the CLI a FakeRemote with ``CliRunner().invoke(cli, args, obj=CliContext(...))``, the way
httpx takes a transport, and no test patches a module global.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import click

from ringtrain.remote import Remote
from ringtrain.spec import SshSpec


@dataclass(frozen=True, slots=True)
class SshOptions:
    ssh: SshSpec
    connect_timeout: float = 5.0
    concurrency: int = 64


RemoteFactory = Callable[[SshOptions], Remote]


def ssh_remote(options: SshOptions) -> Remote:
    """The real one: paramiko, strict host keys, ssh_config honoured."""
    from ringtrain.remote.ssh import SshRemote  # noqa: PLC0415 - paramiko only when needed

    # paramiko logs tracebacks for failures we already report per host
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    return SshRemote(
        options.ssh.config,
        options.ssh.known_hosts,
        accept_new_host_keys=options.ssh.accept_new_host_keys,
        connect_timeout=options.connect_timeout,
        concurrency=options.concurrency,
    )


@dataclass(frozen=True, slots=True)
class CliContext:
    remote_factory: RemoteFactory = ssh_remote


def cli_context() -> CliContext:
    """The context of the running command (a default one outside the ``ringtrain`` group)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(CliContext) if ctx is not None else None
    return obj if obj is not None else CliContext()
