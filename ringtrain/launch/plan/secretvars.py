"""Which variables are secrets, how they are shown, and which go to the ranks by file.

Pure. A variable is a secret by its name (``API_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...) or by its
value (a URL with a password, a private key); the control token always is. ``by_file`` picks the
secrets a backend would otherwise put on a command line or on the wire, whose values go instead
in the 0600 secrets file written over ssh before the start (launch/job/deliver.py,
rank/secretfile.py):

* horovodrun (``--gloo`` and ``--mpi``) forwards its whole environment: over Gloo it writes every
  value into each rank's ``sh -c`` / ``ssh`` command line, over MPI it passes each one to its
  mpirun with ``-x``; every secret of the launcher's environment and the delta goes by file.
* mpirun forwards the ``-x`` names only, but Open MPI ships their values to each host's
  ``orted`` in its launch message, over its own TCP link, in clear: every secret among those
  names goes by file.
* srun: Slurm carries the environment itself; no file (docs/THREAT_MODEL.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ringtrain.rank import envvars
from ringtrain.spec import Backend

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


def _secret(name: str, value: str | None) -> bool:
    return name == envvars.CONTROL_TOKEN or is_secret(name, value)


def by_file(backend: Backend, environ: Mapping[str, str], delta: Mapping[str, str],
            forward: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The secrets that reach the ranks by the secrets file under ``backend`` (see above),
    with their values (the delta's value wins, as it does in the child's environment)."""
    merged = {**environ, **delta}
    if backend is Backend.HOROVODRUN:
        names: Sequence[str] = [k for k in merged if not _HOROVOD_KEEPS.match(k)]
    elif backend is Backend.MPIRUN:
        names = [k for k in forward if k in merged]
    else:
        return ()
    return tuple(sorted((k, merged[k]) for k in names if _secret(k, merged[k])))
