"""The Remote a launch reaches its hosts through when the caller hands none: SSH with strict
host keys and ssh_config honoured, through paramiko (``SshRemote``, the default) or OpenSSH's
own ``ssh`` (``OpenSshRemote``, ``--ssh-transport openssh``), as the spec's ``SshSpec`` says.
The CLI's context (cli/context.py) and ``ringtrain.run()`` both default to this factory; tests
hand their own."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ringtrain.assembly.launch_spec import ssh_transport
from ringtrain.remote import Remote
from ringtrain.remote.openssh import OpenSshRemote
from ringtrain.spec import SshSpec

if TYPE_CHECKING:
    from ringtrain.remote.ssh import SshRemote


@dataclass(frozen=True, slots=True)
class SshOptions:
    ssh: SshSpec
    connect_timeout: float = 5.0
    concurrency: int = 64


RemoteFactory = Callable[[SshOptions], Remote]


def ssh_remote(options: SshOptions) -> Remote:
    """The real one, by ``options.ssh.transport`` (a recorded spec's checked again here)."""
    kind: type[OpenSshRemote] | type[SshRemote]
    if ssh_transport(options.ssh.transport) == "openssh":
        kind = OpenSshRemote
    else:
        from ringtrain.remote.ssh import SshRemote  # noqa: PLC0415 - paramiko only when needed

        # paramiko logs tracebacks for failures we already report per host
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            logging.getLogger("paramiko").setLevel(logging.CRITICAL)
        kind = SshRemote
    return kind(options.ssh.config, options.ssh.known_hosts,
                accept_new_host_keys=options.ssh.accept_new_host_keys,
                connect_timeout=options.connect_timeout, concurrency=options.concurrency)
