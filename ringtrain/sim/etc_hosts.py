"""Name resolution of sim hosts in the root namespace: a marked block in /etc/hosts.

Who needs ``gpu01`` to resolve in the root namespace? ssh with the generated config does not
(it carries ``HostName``). Open MPI 4.1's mpirun with ``plm_rsh_agent "ssh -F <config>"`` did
not either in our measurements: a 4-rank mpi4py Allreduce on gpu01+gpu02 ran with the names
absent from /etc/hosts and with them pointing at wrong addresses. But tools that take bare host
names do: plain ``ssh gpu01``, horovodrun (no ``-F``), paramiko without the config, Python's
``socket.gethostbyname`` in a probe, and STACK.md records mpirun needing it. So ``up`` makes the
names resolve like on a real cluster, unless ``SimConfig(hosts_in_etc_hosts=False)``
(``ringtrain sim up --no-etc-hosts``).

Options considered: a DNS server (a resolver change, more invasive), ``HOSTALIASES`` or
nss_wrapper (only for processes given special environment: every launcher call would have to
know it talks to a sim), a mount namespace around the launcher (it would have to run inside it).
The least invasive choice that works for any process is a block in /etc/hosts, delimited by
marker lines naming the cluster, written and removed under a lock, in place (the file may be a
bind mount), never touching a line outside the block; ``down`` removes it::

    # >>> ringtrain sim rt: managed block, `ringtrain sim down --name rt` removes it
    10.213.7.11	gpu01
    # <<< ringtrain sim rt

Two sim clusters up at once (a user's and a test session's) never name the same host: only the
default cluster ``rt`` has ``gpu01..``, any other ``<name>-gpu01..`` (config.host_name). Were two
blocks to name one host, the first would win for every bare-name lookup (mpirun's included).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ringtrain.sim.proc import locked

log = logging.getLogger(__name__)

ETC_HOSTS = Path("/etc/hosts")


def _markers(name: str) -> tuple[str, str]:
    return (
        f"# >>> ringtrain sim {name}: managed block, `ringtrain sim down --name {name}` removes it",
        f"# <<< ringtrain sim {name}",
    )


def strip_block(text: str, name: str) -> str:
    """``text`` without this cluster's block (pure)."""
    begin, end = _markers(name)
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if stripped == begin:
            inside = True
        elif inside and stripped == end:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def with_block(text: str, name: str, entries: dict[str, str]) -> str:
    """``text`` with this cluster's block (``{host: address}``) replaced or appended (pure)."""
    base = strip_block(text, name)
    if base and not base.endswith("\n"):
        base += "\n"
    begin, end = _markers(name)
    body = "".join(f"{addr}\t{host}\n" for host, addr in entries.items())
    return f"{base}{begin}\n{body}{end}\n"


def shadowing(text: str, name: str, entries: dict[str, str]) -> list[tuple[int, str]]:
    """Lines outside this cluster's block that name one of its hosts (pure): ``(line number,
    line)``. A line before the block wins every bare-name lookup; one after it loses them all.
    """
    begin, end = _markers(name)
    found, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line == begin or (inside and line == end):
            inside = line == begin
            continue
        words = line.split("#", 1)[0].split()
        if not inside and len(words) > 1 and set(words[1:]) & entries.keys():
            found.append((number, line))
    return found


def _write_in_place(path: Path, text: str) -> None:
    with open(path, "r+") as fh:
        fh.seek(0)
        fh.write(text)
        fh.truncate()


def add(name: str, entries: dict[str, str], path: Path = ETC_HOSTS) -> None:
    with locked("etc-hosts"):
        old = path.read_text()
        for number, line in shadowing(old, name, entries):
            log.warning("%s:%d names a host of sim cluster %s (%s): bare-name lookups of that "
                        "name may reach another address; remove the line or pick another "
                        "--name", path, number, name, line.strip())
        new = with_block(old, name, entries)
        if new != old:
            _write_in_place(path, new)
            log.info("%s: added block for sim cluster %s", path, name)


def remove(name: str, path: Path = ETC_HOSTS) -> bool:
    with locked("etc-hosts"):
        old = path.read_text()
        new = strip_block(old, name)
        if new != old:
            _write_in_place(path, new)
            log.info("%s: removed block of sim cluster %s", path, name)
            return True
    return False
