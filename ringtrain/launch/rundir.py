"""The run directory: runs/<id>/ with the job's logs, plan.json, hostfile, result.json.

It is created 0700 and never through a link, in a runs directory that belongs to the user or
root (a world-writable one must be sticky, as /tmp is; a group-writable team directory is the
team's choice), so another user can neither read it nor swap it for a directory of theirs.
"Belongs to the user" is judged by what a file the user creates there looks like, so a home
on NFS with root squashing (root's files owned by ``nobody``) is the user's too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from ringtrain.errors import SetupError

__all__ = ["append_private", "make_run_dir", "write_private"]


def make_run_dir(run_dir: Path) -> None:
    """Create the run directory, or say plainly why it cannot be (before anything starts)."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # a restart's second call, the dry run's
            os.mkdir(run_dir, 0o700)
        st = os.lstat(run_dir)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise SetupError(
                f"the run directory {run_dir} is a link or not a directory",
                "remove it (another user may have planted it) or pass another --runs-dir",
            )
        mine = _owner_of_new_file(run_dir)
        if st.st_uid != mine:
            raise SetupError(f"the run directory {run_dir} is not yours",
                             "remove it (another user may have left it) or pass another --runs-dir")
        _refuse_foreign_parent(run_dir.parent, mine)
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(run_dir, 0o700)
    except OSError as err:
        raise SetupError(
            f"cannot use the run directory {run_dir}: {err.strerror or err}",
            "pass --runs-dir DIR with a directory you can write (logs, plan.json, result.json "
            "and default checkpoints go there)",
        ) from None


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """A file of the run directory, readable by the user only (0600 whatever the umask; 0700
    for a program), so ``launch --from`` trusts it back."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        os.fchmod(f.fileno(), mode)
    os.replace(tmp, path)


def append_private(path: Path, text: str) -> None:
    """Append ``text`` to a file of the run directory (created 0600), never through a link: a
    link planted at ``path`` fails with ELOOP instead of being followed."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    data = text.encode()
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def _owner_of_new_file(folder: Path) -> int:
    """The owner a file created in ``folder`` gets: the user, or ``nobody`` under root
    squashing. Also proves the folder takes writes."""
    probe = folder / f".writable-{secrets.token_hex(4)}"
    fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        return os.fstat(fd).st_uid
    finally:
        os.close(fd)
        probe.unlink()


def _refuse_foreign_parent(runs_dir: Path, mine: int) -> None:
    st = os.stat(runs_dir)  # the directory a link leads to is what counts
    foreign = st.st_uid not in (mine, os.geteuid(), 0)
    everyone = st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX
    if foreign or everyone:
        why = "belongs to another user" if foreign else (
            "is writable by everyone without the sticky bit")
        raise SetupError(
            f"the runs directory {runs_dir} {why}: they could read or replace the job's logs "
            "and plan",
            "pass --runs-dir with a directory of your own",
        )


def write_replacing(path: Path, text: str) -> None:
    """Write ``path`` whole: a reader sees the old text or the new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
