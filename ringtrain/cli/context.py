"""What every command gets from the ``ringtrain`` group: the remote factory (the SSH seam).

Commands build their Remote through ``remote_factory`` instead of naming SshRemote, so a test
hands the CLI a FakeRemote with ``CliRunner().invoke(cli, args, obj=CliContext(...))``, the way
httpx takes a transport, and no test patches a module global. The default factory is the
assembly's (ringtrain/assembly/remotes.py), the same ``ringtrain.run()`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from ringtrain.assembly.remotes import RemoteFactory, SshOptions, ssh_remote

__all__ = ["CliContext", "RemoteFactory", "SshOptions", "cli_context", "ssh_remote"]


@dataclass(frozen=True, slots=True)
class CliContext:
    remote_factory: RemoteFactory = ssh_remote


def cli_context() -> CliContext:
    """The context of the running command (a default one outside the ``ringtrain`` group)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(CliContext) if ctx is not None else None
    return obj if obj is not None else CliContext()
