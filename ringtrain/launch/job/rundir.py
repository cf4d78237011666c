"""The run directory: runs/<id>/ with the job's logs, plan.json, hostfile, result.json.

A path checked is the path used. ``make_run_dir`` walks from / down to the runs directory one
directory at a time, each opened without following a link (a link's target is walked the same
way, from the directory that holds the link) and judged on its open descriptor as OpenSSH's
StrictModes judges the folders above authorized_keys (``trust.untrusted_dir``): owned by the
user or root, writable by nobody else, unless sticky (/tmp) or writable by a group the user
named as trusted (``--trust-group``). So only the user, root (and that group) can move the run
directory aside, or a directory above it, and put their own in its place. Then runs/<id>/ is
created 0700 through the runs directory's descriptor and kept open: a ``RunDir``.

Every file the launcher writes there goes through that descriptor, never through a link
(``RunDir.write``, ``append``, ``open_append``), and the programs it starts on this machine
(mpirun, horovodrun, the ssh shim and the discovery script they run) name its files through
``RunDir.reach``, ``/proc/<launcher pid>/fd/<n>``: the directory the launcher holds, whatever
was renamed since. What is shown and recorded (plan.json, ``--dry-run``) stays runs/<id>.

"Belongs to the user" is judged by what a file the user creates there looks like, so a home
on NFS with root squashing (root's files owned by ``nobody``) is the user's too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from ringtrain import trust
from ringtrain.errors import SetupError
from ringtrain.rank import procfs

__all__ = ["RunDir", "make_run_dir"]

_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # search rights only
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_STEPS = 64  # links followed and directories created on the way: a loop ends here
_FIX = ("pass --runs-dir DIR with a directory you can write (logs, plan.json, result.json and "
       "default checkpoints go there)")


class RunDir:
    """An open run directory. ``path`` is its name (shown, recorded, the ranks'); every file is
    reached through the descriptor, a name relative to it (``attempt-1/plan.json``), and no
    link is followed. ``reach`` names the same directory for this machine's child processes."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd
        self.reach = Path(f"/proc/{os.getpid()}/fd/{fd}")
        self._closer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._closer()

    def record_launcher(self) -> None:
        """``launcher.json``, who runs this launch: ``ringtrain runs`` tells a running launch
        from one whose launcher was killed before it could write result.json."""
        record = {"pid": os.getpid(), "start": procfs.start_time(os.getpid()),
                  "host": os.uname().nodename}  # gethostname(), without a socket module
        self.write("launcher.json", json.dumps(record))

    def mkdir(self, rel: str, mode: int = 0o700) -> None:
        """A directory inside (its folder already there); one already there is kept."""
        with self._at(rel) as (folder, name), contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=folder)

    def write(self, rel: str, text: str | bytes, mode: int = 0o600) -> None:
        """Write ``rel`` whole (a reader sees the old text or the new one): a new file,
        0600 whatever the umask (0700 for a program), renamed over whatever was there, a
        link included, which is replaced, not followed. ``launch --from`` trusts it back."""
        with self._at(rel) as (folder, name):
            tmp = f".{name}.{secrets.token_hex(4)}"
            fd = os.open(tmp, _NEW, 0o600, dir_fd=folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(text.encode() if isinstance(text, str) else text)
                    os.fchmod(f.fileno(), mode)
                os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)
                raise

    def append(self, rel: str, text: str) -> None:
        """Append ``text`` to ``rel`` (created 0600); a link there fails with ELOOP."""
        with self.open_append(rel) as f:
            f.write(text)

    def open_append(self, rel: str) -> IO[str]:
        """``rel`` open for appending (created 0600), never through a link; line-buffered,
        so a rank's log shows each line as it comes (``tail -f``), not at 8 KiB or the end."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        with self._at(rel) as (folder, name):
            fd = os.open(name, flags, 0o600, dir_fd=folder)
        return os.fdopen(fd, "a", encoding="utf-8", buffering=1)

    def read_text(self, rel: str, errors: str = "strict") -> str:
        """``rel`` as the launcher wrote it (no link followed)."""
        with self._at(rel) as (folder, name):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        with os.fdopen(fd, encoding="utf-8", errors=errors) as f:
            return f.read()

    @contextlib.contextmanager
    def _at(self, rel: str) -> Iterator[tuple[int, str]]:
        """The descriptor of the folder holding ``rel`` (each step opened without following a
        link) and ``rel``'s last name."""
        *folders, name = rel.split("/")
        if any(part in ("", ".", "..") for part in (*folders, name)):
            raise ValueError(f"not a name inside the run directory: {rel!r}")
        opened: list[int] = []
        try:
            for part in folders:
                opened.append(os.open(part, _DIR, dir_fd=opened[-1] if opened else self.fd))
            yield (opened[-1] if opened else self.fd), name
        finally:
            for fd in opened:
                os.close(fd)


def make_run_dir(run_dir: Path, trust_groups: Sequence[str] = ()) -> RunDir:
    """Create the run directory and open it, or say plainly why it cannot be (before anything
    starts): the directories down to it must be safe (see the module's text), ``trust_groups``
    the groups whose members the user trusts to write them."""
    run_dir = run_dir.absolute()
    gids = _group_ids(trust_groups)
    try:
        runs, chain = _walk(run_dir.parent)
        try:
            return _open_run_dir(runs, run_dir, chain, gids)
        finally:
            os.close(runs)
    except OSError as err:
        where = f" ({err.filename})" if err.filename else ""
        raise SetupError(f"cannot use the run directory {run_dir}: {err.strerror or err}{where}",
                         _FIX) from None


def _open_run_dir(runs: int, run_dir: Path, chain: list[tuple[str, os.stat_result]],
                  gids: frozenset[int]) -> RunDir:
    name = run_dir.name
    created = True
    try:
        os.mkdir(name, 0o700, dir_fd=runs)
    except FileExistsError:  # a run id given twice; the same checks follow
        created = False
    try:
        fd = os.open(name, _DIR, dir_fd=runs)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise SetupError(f"the run directory {run_dir} is a link or not a directory",
                         "remove it (another user may have planted it) or pass another "
                         "--runs-dir") from None
    try:
        st = os.fstat(fd)
        mine = st.st_uid if st.st_uid == os.geteuid() else _owner_of_new_file(fd)
        if st.st_uid != mine:
            raise SetupError(f"the run directory {run_dir} is not yours", "remove it (another "
                             "user may have left it) or pass another --runs-dir")
        uids = frozenset({mine, os.geteuid(), 0})
        for where, seen in chain:
            owner = trust.Owner.of(seen)
            why = trust.untrusted_dir(owner, uids, gids)
            if why is not None:
                raise SetupError(
                    f"the runs directory {run_dir.parent} is not safe: {where} is on its way "
                    f"and {why}, so others could move the run directory aside and put theirs "
                    "in its place (the launcher runs programs from it)",
                    trust.dir_fix(where, owner, uids))
        if st.st_mode & 0o7777 != 0o700:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=runs)
        raise
    return RunDir(run_dir, fd)


def _walk(path: Path) -> tuple[int, list[tuple[str, os.stat_result]]]:
    """``path`` opened down from /, one directory at a time, none through a link (a link is
    read and its target walked the same way); missing ones created (0755). Returns the last
    one's descriptor (O_PATH) and every directory passed on the way, with its status."""
    root = os.open("/", _WALK)
    stack: list[tuple[str, int]] = [("/", root)]
    chain = [("/", os.fstat(root))]
    todo = list(reversed(path.parts[1:]))
    steps = 0
    try:
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[1])
                continue
            where, folder = stack[-1]
            steps += 1
            if steps > _MAX_STEPS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            try:
                fd = os.open(name, _WALK, dir_fd=folder)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=folder)
                todo.append(name)
                continue
            except NotADirectoryError:  # a link, or not a directory at all
                try:
                    target = os.readlink(name, dir_fd=folder)
                except OSError:
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                             os.path.join(where, name)) from None
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[1])
                todo.extend(reversed(target.split("/")))
                continue
            here = os.path.join(where, name)
            stack.append((here, fd))
            chain.append((here, os.fstat(fd)))
        return stack.pop()[1], chain
    finally:
        for _, fd in stack:
            os.close(fd)


def _owner_of_new_file(folder: int) -> int:
    """The owner a file created in ``folder`` gets: the user, or ``nobody`` under root
    squashing. Also proves the folder takes writes."""
    probe = f".writable-{secrets.token_hex(4)}"
    fd = os.open(probe, _NEW, 0o600, dir_fd=folder)
    try:
        return os.fstat(fd).st_uid
    finally:
        os.close(fd)
        os.unlink(probe, dir_fd=folder)


def _group_ids(names: Sequence[str]) -> frozenset[int]:
    import grp  # noqa: PLC0415 - POSIX only

    gids = set()
    for name in names:
        try:
            gids.add(int(name) if name.isdigit() else grp.getgrnam(name).gr_gid)
        except KeyError:
            raise SetupError(f"--trust-group {name}: there is no such group",
                             "name a group that `getent group` lists") from None
    return frozenset(gids)
