"""The secrets file: how secret values reach the ranks when the launcher must not carry them.

``horovodrun --gloo`` writes its whole environment onto each rank's command line (``sh -c 'env
K=V ... python ...'`` on this machine, ``ssh HOST '... env K=V ...'`` to another), which anyone
on the host reads in ``ps``. So under Gloo the launcher gives horovodrun the secrets' names
only, plus ``RINGTRAIN_ENV_FILE``: a path that is the same string on every host
(``~/.ringtrain/secrets/<run id>-<attempt>.json``, ``~`` being the user's home on that host).
Under mpirun the same file keeps the secrets out of Open MPI's launch message, which carries
every ``-x`` value to each host's daemon in clear (launch/plan/secretvars.py).

* ``store``: before the job, the launcher writes the file on every host; on this machine
  directly, on the others as ``python -m ringtrain.rank.secretfile --store PATH`` with the
  values on stdin (never in argv).
* ``apply``: each rank reads it first thing (``entry.py``) and puts the values in its
  environment; the job then runs as if horovodrun had carried them.
* ``remove_run``: the reaper removes a run's files on every host at teardown.

Nothing is created through a link: ``~/.ringtrain`` and ``~/.ringtrain/secrets`` are the user's
own directories, mode 0700, never symbolic links; the file is created new (O_EXCL, O_NOFOLLOW)
with mode 0600. Where several hosts share one home, each finds the file another host wrote:
that is accepted when it holds the same values. A rank refuses a file that is a link, is not
the user's, or is not 0600. Standard library only, like the rest of ``ringtrain.rank``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import pwd
import re
import secrets
import stat
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from ringtrain.rank import envvars

DIR = "~/.ringtrain/secrets"
MAX_BYTES = 1 << 20
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}-\d+\.json\Z")
_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SecretFileError(Exception):
    """A secrets file that cannot be written, read or trusted; the message is one line."""


def path_for(run_id: str, attempt: int) -> str:
    """The file of one attempt, as the ranks are told it (``~`` expanded on each host)."""
    return f"{DIR}/{run_id}-{attempt}.json"


def home() -> Path:
    """The user's home from the password database, not ``$HOME``: horovodrun forwards the
    launcher's ``HOME`` to every host, where it need not be the user's home. Where that home
    is no directory on this host (``nobody``'s ``/nonexistent``, an account whose home was
    never made here), ``$HOME``: the writer and the reader on a host both ask this."""
    listed = Path(pwd.getpwuid(os.getuid()).pw_dir)
    if listed.is_dir():
        return listed
    return Path(os.environ.get("HOME") or listed)


def resolve(path: str, root: Path | None = None) -> Path:
    """``path`` with ``~`` as the user's home (``root``: another directory in its place)."""
    if not path.startswith("~/"):
        return Path(path)
    return (root or home()) / path[2:]


def encode(values: Mapping[str, str]) -> bytes:
    return json.dumps(dict(sorted(values.items()))).encode()


def decode(data: bytes) -> dict[str, str]:
    try:
        values = json.loads(data)
    except ValueError:
        raise SecretFileError("not a secrets file (no JSON object in it)") from None
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and _VAR_RE.match(k) and isinstance(v, str) and "\0" not in v
        for k, v in values.items()
    ):
        raise SecretFileError("not a secrets file (a JSON object of variable names to strings)")
    return values


def store(path: str, data: bytes, root: Path | None = None) -> None:
    """Write ``data`` (``encode``'s) to the file ``path`` names, in the user's own 0700
    directory, created new and 0600; SecretFileError (one line) when it cannot be.
    ``root``: the directory standing for the home (tests)."""
    name = _file_name(path, root)
    decode(data)  # only a secrets file is ever written
    try:
        with contextlib.ExitStack() as fds:
            parent = os.open(root or home(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fds.callback(os.close, parent)
            for part, shown in ((".ringtrain", "~/.ringtrain"), ("secrets", DIR)):
                parent = _own_dir(parent, part, shown)
                fds.callback(os.close, parent)
            _write_new(parent, name, data, path)
    except SecretFileError:
        raise
    except OSError as err:
        raise SecretFileError(f"cannot write {path}: {err.strerror or err}") from None


def load(path: str, root: Path | None = None) -> dict[str, str]:
    """The values in the file ``path`` names, after checking it is the user's own regular
    file, mode 0600, reached through no symbolic link at its last step."""
    return decode(_read_checked(None, str(resolve(path, root)), path))


def apply(environ: MutableMapping[str, str] | None = None, root: Path | None = None) -> None:
    """Put the values of the file ``RINGTRAIN_ENV_FILE`` names into the environment (this
    process's by default); nothing when it is not set."""
    env = os.environ if environ is None else environ
    path = env.get(envvars.ENV_FILE)
    if path:
        env.update(load(path, root))


def remove(path: str, root: Path | None = None) -> bool:
    """Remove one secrets file; False when it was not there."""
    name = _file_name(path, root)
    try:
        fd = os.open(resolve(DIR, root), _DIR_FLAGS)
    except OSError:  # none here, or not a directory of ours
        return False
    try:
        os.unlink(name, dir_fd=fd)  # a link is removed itself, never followed
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def remove_run(run_id: str, root: Path | None = None) -> int:
    """Remove every secrets file of run ``run_id`` on this host (every attempt's, and any a
    writer left half-made); how many went."""
    pattern = re.compile(rf"^\.?{re.escape(run_id)}-\d+\.json(\.[0-9a-f]+\.tmp)?\Z")
    try:
        fd = os.open(resolve(DIR, root), _DIR_FLAGS)
    except OSError:  # none here, or not a directory of ours to clean
        return 0
    removed = 0
    try:
        for name in os.listdir(fd):
            if pattern.match(name):
                with contextlib.suppress(FileNotFoundError):  # another host sharing the home
                    os.unlink(name, dir_fd=fd)
                    removed += 1
    finally:
        os.close(fd)
    return removed


def _file_name(path: str, root: Path | None) -> str:
    target = resolve(path, root)
    if target.parent != resolve(DIR, root) or not _FILE_RE.match(target.name):
        raise SecretFileError(f"{path} is not a secrets file path ({path_for('RUN', 1)})")
    return target.name


def _own_dir(parent: int, name: str, shown: str) -> int:
    """The directory ``name`` under ``parent``, made 0700 when missing: the user's own, never a
    symbolic link (group and others' access taken away); its descriptor."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as err:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
                raise SecretFileError(f"{shown} is a symbolic link; refused") from None
        raise SecretFileError(f"{shown}: {err.strerror or err}") from None
    info = os.fstat(fd)
    if info.st_uid != os.getuid():
        os.close(fd)
        raise SecretFileError(f"{shown} belongs to uid {info.st_uid}, not to you "
                              f"(uid {os.getuid()}); refused")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _write_new(directory: int, name: str, data: bytes, shown: str) -> None:
    """Write a whole file under another name, then link it into place: a reader (or another
    host's writer, on a shared home) never sees it half written, and an existing file is
    never replaced."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=directory)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory,
                    follow_symlinks=False)
        except FileExistsError:  # another host sharing this home wrote it first
            if _read_checked(directory, name, shown) != data:
                raise SecretFileError(f"{shown} already exists with other values; "
                                      "refused") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=directory)


def _read_checked(directory: int | None, name: str, shown: str) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        raise SecretFileError(f"{shown} does not exist (never written on this host, or "
                              "removed already)") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise SecretFileError(f"{shown} is a symbolic link; refused") from None
        raise SecretFileError(f"cannot read {shown}: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretFileError(f"{shown} is not a regular file; refused")
        if info.st_uid != os.getuid():
            raise SecretFileError(f"{shown} belongs to uid {info.st_uid}, not to you "
                                  f"(uid {os.getuid()}); refused")
        if stat.S_IMODE(info.st_mode) != 0o600:
            raise SecretFileError(f"{shown} has mode {stat.S_IMODE(info.st_mode):04o}, "
                                  "not 0600; refused")
        chunks, size = [], 0
        while size <= MAX_BYTES and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise SecretFileError(f"{shown} is larger than {MAX_BYTES} bytes; refused")
        return b"".join(chunks)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--store", metavar="PATH", help="write the values read from stdin")
    what.add_argument("--remove", metavar="PATH", help="remove the file")
    args = p.parse_args(argv)
    try:
        if args.store is not None:
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise SecretFileError(f"more than {MAX_BYTES} bytes on stdin; refused")
            store(args.store, data)
        else:
            remove(args.remove)
    except SecretFileError as err:
        sys.stderr.write(f"secretfile: {err}\n")
        return 1
    except OSError as err:
        sys.stderr.write(f"secretfile: {err.strerror or err}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
