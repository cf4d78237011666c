"""Which variables are secrets, how they are shown, and which go to the ranks by file.

Pure. What the user hands the ranks with ``--env NAME=VALUE`` (or ``--env NAME``, the config
files' ``env``/``env_file``, ``ringtrain.run(env=...)``) is a secret whatever it is called,
unless the user says it is plain (``--env-plain``, ``env_plain``: ``Secrecy``); nothing is
guessed for those. What the launcher forwards of its own environment without being asked
(``FORWARD_NAMES``, horovodrun's and srun's whole environment) is a secret by its name
(``API_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...) or by its value (a URL with a password, a private
key); the control token always is. ``by_file`` picks the secrets a backend would otherwise put
on a command line or on the wire, whose values go instead in the 0600 secrets file written on
every host before the start (launch/job/deliver.py, rank/secretfile.py):

* horovodrun (``--gloo`` and ``--mpi``) forwards its whole environment: over Gloo it writes every
  value into each rank's ``sh -c`` / ``ssh`` command line, over MPI it passes each one to its
  mpirun with ``-x``; every secret of the launcher's environment and the delta goes by file.
* mpirun forwards the ``-x`` names only, but Open MPI ships their values to each host's
  ``orted`` in its launch message, over its own TCP link, in clear: every secret among those
  names goes by file.
* srun passes its whole environment (``--export=ALL``) to every node's slurmd in its launch
  request: every secret of the launcher's environment and the delta goes by file, written on
  each node by the allocation's Remote (a one-task srun step per node, the values on its stdin).
  The srun steps ringtrain runs itself (probe, delivery, reaper) get the launcher's environment
  less its secrets (``public_environ``).

Variables a process reads as it starts, before the rank's entry can read the file
(``STARTUP_NAMES``: PATH, LD_LIBRARY_PATH, PYTHONPATH...), cannot go by file: ``--env`` sets them
in the environment, as plain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ringtrain.rank import envvars
from ringtrain.spec import Backend, EnvSpec

_SECRET_RE = re.compile(
    r"(SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|_KEY$|_KEY_ID$|^AUTH)", re.IGNORECASE
)
REDACTED = "<redacted>"

# a password in a URL (postgres://user:pw@host, https://user:token@host; up to the last @,
# since an unencoded one may hold / or @) or a private key,
# whatever the variable is called: DATABASE_URL=postgres://u:pw@db was stored as it was
_URL_PASSWORD_RE = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)\S+(?=@)")
_PRIVATE_KEY = "-----BEGIN "

# what horovodrun never exports to the ranks (horovod.runner.common.util.env.IGNORE_REGEXES)
_HOROVOD_KEEPS = re.compile(r"^(BASH_FUNC_.*|OLDPWD|.*CUDA_VISIBLE_DEVICES|HOROVOD_SECRET_KEY)$")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.search(name))


def is_secret(name: str, value: str | None) -> bool:
    """A secret by its name (API_TOKEN, AWS_SECRET_ACCESS_KEY...) or by its value."""
    return is_secret_name(name) or (value is not None and (
        _URL_PASSWORD_RE.search(value) is not None or _PRIVATE_KEY in value))


def redact_value(name: str, value: str) -> str:
    """``value`` as it may be shown or stored: a secret name's value whole, a URL's password
    only (the rest of the URL still tells where it points)."""
    if is_secret_name(name) or _PRIVATE_KEY in value:
        return REDACTED
    return _URL_PASSWORD_RE.sub(lambda m: m.group("head") + REDACTED, value)


def redact_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, redact_value(k, v)) for k, v in env)


# read by the dynamic loader or the interpreter as the rank's process starts, before its entry
# reads the secrets file: these must be in the environment the launcher hands on
STARTUP_NAMES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE",
    "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
})


@dataclass(frozen=True, slots=True)
class Secrecy:
    """What the user said of the variables they hand the ranks: ``secret`` (``--env``, the
    default), ``plain`` (``--env-plain``). Any other variable is judged by name and value."""

    secret: frozenset[str] = frozenset()
    plain: frozenset[str] = frozenset()

    @classmethod
    def of(cls, env: Iterable[EnvSpec]) -> Secrecy:
        specs = list(env)
        return cls(frozenset(e.name for e in specs if not e.plain and e.name not in STARTUP_NAMES),
                   frozenset(e.name for e in specs if e.plain or e.name in STARTUP_NAMES))

    def is_secret(self, name: str, value: str | None) -> bool:
        """Said secret; else, said plain, a secret only by its value (a URL's password, a
        private key: kept safe whatever was said); else by its name or value."""
        if name == envvars.CONTROL_TOKEN or name in self.secret:
            return True
        return is_secret("" if name in self.plain else name, value)

    def redact(self, name: str, value: str) -> str:
        if name == envvars.CONTROL_TOKEN or name in self.secret:
            return REDACTED
        # plain: shown, but a URL's password or a private key still not
        return redact_value("", value) if name in self.plain else redact_value(name, value)

    def redact_env(self, env: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        return tuple((k, self.redact(k, v)) for k, v in env)


def public_environ(environ: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` less every variable that is a secret by its name or value, and those
    ``also`` names (``--env``'s): the srun steps ringtrain runs on the nodes (probe, secrets
    file, reaper), whose ``--export=ALL`` ships this environment to each slurmd."""
    hidden = set(also)
    return {k: v for k, v in environ.items() if k not in hidden and not is_secret(k, v)}


def by_file(backend: Backend, environ: Mapping[str, str], delta: Mapping[str, str],
            forward: Sequence[str], secrecy: Secrecy = Secrecy(),
            withheld: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    """The secrets that reach the ranks by the secrets file under ``backend`` (see above),
    with their values (the delta's value wins, as it does in the child's environment);
    ``withheld``: the launcher's variables that reach no rank (none of them goes by file)."""
    kept = set(withheld)
    merged = {k: v for k, v in {**environ, **delta}.items() if k not in kept}
    if backend is Backend.HOROVODRUN:
        names: Sequence[str] = [k for k in merged if not _HOROVOD_KEEPS.match(k)]
    elif backend is Backend.MPIRUN:
        names = [k for k in forward if k in merged]
    else:  # srun --export=ALL: its whole environment
        names = list(merged)
    return tuple(sorted((k, merged[k]) for k in names
                        if k not in STARTUP_NAMES and secrecy.is_secret(k, merged[k])))
