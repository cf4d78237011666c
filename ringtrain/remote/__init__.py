"""The remote seam (``Remote``: run commands on many hosts at once) and its SSH implementations.

``base``: CmdResult, HostResults (one per host, with ``.failed``), the Remote protocol (and
InputRemote, stdin too), LocalRemote, fan_out (standard library only).
``ssh``: SshRemote (paramiko, strict host keys, ssh_config). ``keys``: known_hosts.
``openssh``: OpenSshRemote (OpenSSH's ssh, ``--ssh-transport openssh``); ``sshcli``: its argv
and its failures read (pure).
``sshconf``: the per-run ssh_config mpirun's own ssh uses (pure). ``sshg``: each host's
settings from ``ssh -G``; ``sshrules``: the same from OpenSSH's rules, for many hosts at once.
"""

from ringtrain.remote.base import (
    CmdResult,
    HostCommand,
    HostResults,
    InputRemote,
    LocalRemote,
    Remote,
    fan_out,
)

__all__ = ["CmdResult", "HostCommand", "HostResults", "InputRemote", "LocalRemote", "Remote",
           "fan_out"]
