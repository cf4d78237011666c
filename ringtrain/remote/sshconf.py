"""The ssh_config of mpirun's (and horovodrun's) own connections. Pure.

The probe reads user, port and identity file from the inventory and verifies every host key,
but mpirun starts its daemons with plain ``ssh HOST``, which would take the user's settings,
``StrictHostKeyChecking no`` included. So for any remote host the plan writes this file to the
attempt directory and gives mpirun ``plm_rsh_agent "ssh -F <it>"`` (horovodrun: its ssh shim).
ssh_config takes the first value it finds: the per-host lines come first, then host keys
checked strictly (against ``--known-hosts`` when given, else the files the probe read: the
user's known_hosts and the system's), then the user's own configuration (``--ssh-config``,
else ``~/.ssh/config``) and the system's (``/etc/ssh/ssh_config``, which ``-F`` would
otherwise skip) for everything else. The probe already verified (or, with
``--accept-new-host-keys``, recorded) every key these connections meet.
"""

from __future__ import annotations

from pathlib import Path

from ringtrain.errors import UsageError
from ringtrain.hostfile import Host

_BAD = set('"\n\r\t\\')
SYSTEM_CONFIG = "/etc/ssh/ssh_config"  # read by a plain ssh after the user's; -F skips it
ALIVE_INTERVAL_S, ALIVE_COUNT = 5, 3  # ssh's defaults when nobody set them: see render


def needs_ssh_config(hosts: tuple[Host, ...]) -> bool:
    return any(h.user or h.port or h.identity_file for h in hosts if not h.is_local)


def render_ssh_config(
    hosts: tuple[Host, ...], base: Path | None, known_hosts: Path | None = None
) -> str:
    lines = ["# Written by ringtrain from the inventory's SSH settings, for mpirun's ssh."]
    for h in hosts:
        if h.is_local or not (h.user or h.port or h.identity_file):
            continue
        lines.append(f"Host {h.name}")
        if h.user:
            lines.append(f"    User {h.user}")
        if h.port:
            lines.append(f"    Port {h.port}")
        if h.identity_file:
            lines.append(f'    IdentityFile "{_checked(h.identity_file, h.name)}"')
            lines.append("    IdentitiesOnly yes")
    lines.append("")
    lines.append("Host *")
    if known_hosts is not None:  # the file the probe verified (and --accept-new-host-keys grew)
        path = _checked(str(known_hosts.absolute()), "known_hosts")
        lines.append(f'    UserKnownHostsFile "{path}"')
    lines.append("    StrictHostKeyChecking yes")
    included = base.absolute() if base is not None else Path("~/.ssh/config")
    lines.append(f'    Include "{_checked(str(included), "ssh config")}"')
    lines.append(f'    Include "{SYSTEM_CONFIG}"')
    # last, so any value the user's or the system's config sets wins: a session to a host
    # whose link is gone ends in 15 s instead of hanging until TCP gives up (hours), so
    # horovodrun's elastic driver (and mpirun) learn that its ranks are lost
    lines += ["", "Host *", f"    ServerAliveInterval {ALIVE_INTERVAL_S}",
              f"    ServerAliveCountMax {ALIVE_COUNT}"]
    return "\n".join(lines) + "\n"


def render_layered(base: Path) -> str:
    """The file ``ssh -F`` reads for ``--ssh-config base`` on ringtrain's own connections
    (the probe's ``ssh -G`` and, with ``--ssh-transport openssh``, its commands): ``base``,
    then the system's, as a plain ssh reads them and as mpirun's per-run file includes them
    (``render_ssh_config``). ``-F base`` alone skips /etc/ssh/ssh_config, so the probe read
    other settings than the job's ssh (issue 42 item 6)."""
    return ("# Written by ringtrain: --ssh-config, then the system's (-F alone skips it)\n"
            f'Include "{_checked(str(base.absolute()), "ssh config")}"\n'
            f'Include "{SYSTEM_CONFIG}"\n')


def _checked(value: str, what: str) -> str:
    if any(c in _BAD for c in value):
        raise UsageError(
            f"{what}: path {value!r} has quotes, backslashes or control characters",
            "use a plain path for identity files and ssh configs",
        )
    return value
