"""One call of OpenSSH's ``ssh`` client: its argv, and what its exit 255 means. Pure.

``remote/openssh.py`` runs these (``--ssh-transport openssh``). The argv is the one a user
would type: ``ssh [-F CONFIG] -o BatchMode=yes -o StrictHostKeyChecking=yes|accept-new
[-o UserKnownHostsFile=FILE] -o ConnectTimeout=N [-p PORT] [-l USER] [-i KEY -o
IdentitiesOnly=yes] -- HOST 'COMMAND'``. Options on the command line win over every
ssh_config, so no config relaxes host key checking; everything else (hostbased auth,
GSSAPI, ``@cert-authority`` host keys, ProxyJump, ControlMaster) is OpenSSH's own, as for
mpirun's ssh. ssh runs the remote command through the user's shell, so the argv travels as
one ``shlex.join``-quoted string; data for its stdin goes through the pipe, never in argv.

ssh exits 255 for any failure of its own; ``describe_failure`` reads its messages into the
same one-line, fix-bearing text ``SshRemote`` (paramiko) gives for the same failure.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ringtrain.hostfile.model import Host

SSH_FAILED = 255  # ssh's exit status when ssh itself failed (or the command exited 255)
_UNQUOTABLE = set('"\\\n\r\t\0')  # a path ssh's -o parser cannot take between double quotes


@dataclass(frozen=True, slots=True)
class SshClient:
    """What every ssh call of one fan-out shares (the hosts bring user, port and key)."""

    config: Path | None = None  # -F: read instead of ~/.ssh/config and /etc/ssh/ssh_config
    known_hosts: Path | None = None  # else ssh's own (UserKnownHostsFile, ~/.ssh/known_hosts)
    accept_new: bool = False
    connect_timeout: float = 5.0
    program: str = "ssh"


def path_problem(path: str, what: str) -> str | None:
    """Why ``path`` cannot be handed to ssh as ``what``; None when it can."""
    bad = sorted({repr(c) for c in path if c in _UNQUOTABLE})
    if bad:
        return (f"{what} {path!r} has characters ssh cannot take ({' '.join(bad)}): "
                "use a plain path")
    return None


def ssh_argv(client: SshClient, host: Host, argv: Sequence[str]) -> tuple[str, ...]:
    """The ssh command that runs ``argv`` on ``host``. The host name must already be valid
    (``host_name_problem``) and the paths pass ``path_problem``."""
    out = [client.program]
    if client.config is not None:
        out += ["-F", str(client.config)]
    strict = "accept-new" if client.accept_new else "yes"
    out += ["-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={strict}"]
    if client.known_hosts is not None:
        out += ["-o", f'UserKnownHostsFile="{_literal(str(client.known_hosts))}"']
    out += ["-o", f"ConnectTimeout={max(1, math.ceil(client.connect_timeout))}"]
    if host.port:
        out += ["-p", str(host.port)]
    if host.user:
        out += ["-l", host.user]
    if host.identity_file:
        out += ["-i", _literal(host.identity_file), "-o", "IdentitiesOnly=yes"]
    return (*out, "--", host.name, shlex.join(argv))


def _literal(path: str) -> str:
    """ssh expands %-tokens in file names; ``%%`` is a plain ``%``."""
    return path.replace("%", "%%")


_CHANGED = re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED")
_SENT = re.compile(r"fingerprint for the (\S+) key sent by the remote host is\s+(\S+?)\.?$", re.M)
_OFFENDING = re.compile(r"^Offending \S+ key in (.+):(\d+)$", re.M)
_REMOVE = re.compile(r'^\s*ssh-keygen -f "?(.+?)"? -R "?(.+?)"?$', re.M)
_UNKNOWN = re.compile(r"^No (\S+) host key is known for (\S+) and you have requested strict", re.M)
_CERT = re.compile(r"^Certificate invalid: (.+)$", re.M)
_DENIED = re.compile(r"^(?:(\S+): )?Permission denied \(([^)]*)\)", re.M)
_NO_IDENTITY = re.compile(r"^Warning: Identity file (.+) not accessible", re.M)
_CONNECT = re.compile(r"^ssh: connect to host (\S+) port (\d+): (.+)$", re.M)
_TIMED_OUT = re.compile(r"^Connection to (\S+) port (\d+) timed out", re.M)
_RESOLVE = re.compile(r"^ssh: Could not resolve hostname (\S+): (.+)$", re.M)
_CONFIG = re.compile(r"^(.*(?:Bad configuration option|bad configuration options"
                     r"|Can't open user config file|Unsupported option).*)$", re.M)
_SESSION = re.compile(r"^((?:Connection (?:closed|reset) by|kex_exchange_identification|"
                      r"Unable to negotiate|Bad owner or permissions).*)$", re.M)


def describe_failure(  # noqa: PLR0911 - one return per kind of failure, as describe_error
    host: Host, stderr: str, connect_timeout: float, known_hosts: Path | None = None
) -> str:
    """One line, phrased for the user and ending in a fix, for ssh's exit 255 on ``host``."""
    alias, text = host.name, stderr.replace("\r", "")
    if _CHANGED.search(text):
        return _changed(alias, text)
    if "REVOKED HOST KEY DETECTED" in text:
        return (f"host key for {alias} is marked @revoked in known_hosts: the host needs a "
                f"new key (and a new known_hosts line), or pass --exclude {alias}")
    if m := _CERT.search(text):
        return (f"host certificate of {alias} refused ({m.group(1)}): sign the host key again "
                f"with the name ssh connects to among its principals (ssh-keygen -s CA -h -n "
                f"{alias}), or fix the @cert-authority line")
    if m := _UNKNOWN.search(text):
        name, port = _name_port(m.group(2))
        scan = f"ssh-keyscan -p {port} {name}"
        add = (f"add it with `{scan} >> {known_hosts}`" if known_hosts else f"add `{scan}`'s "
               "line to the known_hosts ssh reads (UserKnownHostsFile, else ~/.ssh/known_hosts)")
        return (f"unknown host key for {alias} ({m.group(1)}): {add} after checking the "
                "fingerprint, or pass --accept-new-host-keys")
    if "Host key verification failed" in text:
        return (f"host key verification failed for {alias}: {_last_line(text)}; "
                f"`ssh -v {alias} true` shows which key and file")
    if m := _NO_IDENTITY.search(text):
        return f"identity file not found: {m.group(1)}: fix -i or the inventory's identity_file"
    if m := _DENIED.search(text):
        who = m.group(1) or f"{host.user or 'the current user'}@{alias}"
        return (f"authentication failed for {who} (the server offers {m.group(2)}): check "
                "IdentityFile, ssh-agent, the Kerberos ticket (klist) and authorized_keys")
    if m := _RESOLVE.search(text):
        return (f"cannot resolve host name {m.group(1)}: {m.group(2)}: fix the name, or give "
                "its HostName in the ssh config")
    if m := _CONNECT.search(text) or _TIMED_OUT.search(text):
        return _unreachable(m, connect_timeout)
    if "timed out during banner exchange" in text:
        return (f"timed out after {connect_timeout:g} s waiting for the SSH banner of {alias}: "
                "is sshd overloaded (MaxStartups) or the port not SSH's?")
    if m := _CONFIG.search(text):
        return (f"ssh cannot read its configuration: {m.group(1).strip()}: fix it "
                f"(`ssh -G {alias}` shows how OpenSSH reads it)")
    if m := _SESSION.search(text):
        return f"SSH error with {alias}: {m.group(1).strip()}: `ssh -v {alias} true` shows why"
    return (f"ssh to {alias} failed (exit {SSH_FAILED}): {_last_line(text) or 'no message'}; "
            f"`ssh -v {alias} true` shows why")


def _changed(alias: str, text: str) -> str:
    sent = _SENT.search(text)
    offers = f"the server offers {sent.group(1)} {sent.group(2)}" if sent else "the key differs"
    offending = _OFFENDING.search(text)
    has = f"{offending.group(1)} line {offending.group(2)} has another" if offending else ""
    remove = _REMOVE.search(text)
    run = (f"ssh-keygen -f {shlex.quote(remove.group(1))} -R {shlex.quote(remove.group(2))}"
           if remove else f"ssh-keygen -R {alias}")
    return (f"host key for {alias} CHANGED (possible MITM): fix known_hosts: "
            f"{', '.join(p for p in (offers, has) if p)}; if the host was reinstalled run "
            f"`{run}`")


def _unreachable(m: re.Match[str], connect_timeout: float) -> str:
    where = f"{m.group(1)}:{m.group(2)}"
    why = m.group(3) if m.re is _CONNECT else "timed out"
    if "Connection refused" in why:
        return (f"connection refused by {where} (is sshd running? check the port: -p, or Port "
                "in the ssh config)")
    if "timed out" in why:
        return (f"timed out after {connect_timeout:g} s connecting to {where}: is the host up "
                "and its SSH port open to this machine?")
    return f"cannot connect to {where}: {why}: check the host's network and its address"


def _name_port(known_as: str) -> tuple[str, int]:
    """``[name]:port`` (as known_hosts spells a port other than 22) -> (name, port)."""
    if known_as.startswith("[") and "]:" in known_as:
        name, _, port = known_as[1:].partition("]:")
        if port.isdigit():
            return name, int(port)
    return known_as, 22


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
