"""Which files ringtrain may trust: decided from a file's owner and mode, as OpenSSH's
StrictModes and git's ``safe.directory`` decide. PURE but for ``stat_of`` (one ``os.stat``),
``open_file`` and ``read_open`` (the file judged is the file read).

ringtrain often runs as root on machines other people share. A config file, a discovery
script or a project directory that another user can write is a way for that user to run
commands as whoever launches: so such a file is skipped (config) or refused (a script), with
the reason and the fix. Trusted: owned by the user or by root, and writable by its owner
only (or by its owner's private group too: Debian's umask 002). Settings that run code
(``python``, ``ssh_config``, a discovery script named by ``hosts``) are taken only from files
the user owns. The directories down to a run directory are judged the same way
(``untrusted_dir``): whoever can write one of them can swap the run directory.

A path checked is the path used: ``open_file`` opens a file once, a link at its end read and
its target opened the same way (never followed by the open itself), and judges what it opened
(``fstat``); the caller reads that descriptor (``read_open``) or runs it
(``/proc/self/fd/N``), so a link switched between two files gets either one, judged as itself.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Owner:
    """A file's owner and mode bits: all the decision needs."""

    uid: int
    mode: int
    gid: int = -1  # -1: unknown

    @classmethod
    def of(cls, st: os.stat_result) -> Owner:
        return cls(st.st_uid, stat.S_IMODE(st.st_mode), st.st_gid)


def stat_of(path: Path) -> Owner | None:
    """The owner and mode of ``path`` (links followed); None when it cannot be read."""
    try:
        return Owner.of(os.stat(path))
    except OSError:
        return None


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_LINKS = 8  # links read on the way to a file: a loop ends here


def open_file(path: Path | str, dir_fd: int | None = None) -> tuple[int, Owner]:
    """``path`` (relative to ``dir_fd`` when given) open for reading, and the owner and mode
    of the file opened (``fstat``). The open never follows a link at the end of the path: a
    link there is read and its target opened the same way (a relative one from the link's
    folder), at most ``MAX_LINKS`` times. OSError when it cannot be opened, ELOOP past the
    links, EINVAL for what is not a regular file (a FIFO, a device, a directory): a FIFO
    opened for a config file would block the launcher, a device would be read without end.
    The caller owns the descriptor."""
    name = os.fspath(path)
    for _ in range(MAX_LINKS + 1):
        try:
            fd = os.open(name, _READ, dir_fd=dir_fd)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            try:
                target = os.readlink(name, dir_fd=dir_fd)
            except OSError:
                raise err from None  # a loop in the folders above: not ours to untangle
            name = os.path.join(os.path.dirname(name), target)
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        except BaseException:
            os.close(fd)
            raise
        return fd, Owner.of(st)
    raise OSError(errno.ELOOP, f"more than {MAX_LINKS} links", os.fspath(path))


def read_open(fd: int, limit: int) -> bytes:
    """All of the open file ``fd`` (from its start), at most ``limit`` bytes: OSError (EFBIG)
    past that, without reading on."""
    chunks: list[bytes] = []
    got = 0
    while True:
        chunk = os.pread(fd, min(1 << 20, limit + 1 - got), got)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        got += len(chunk)
        if got > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")


def untrusted_file(owner: Owner, uid: int) -> str | None:
    """Why a file owned and moded so is not to be trusted by ``uid``; None: it is."""
    if owner.uid not in (uid, 0):
        return f"it is owned by {_user(owner.uid)}, not by you ({_user(uid)}) or root"
    if owner.mode & stat.S_IWOTH or (owner.mode & stat.S_IWGRP
                                     and not _private_group(owner.uid, owner.gid)):
        return f"it is writable by its group or by others (mode {owner.mode:04o})"
    return None


def _private_group(uid: int, gid: int) -> bool:
    """The file's group is its owner's own (Debian's user private groups, where umask 002
    makes every new file group-writable): named after the owner, no other member."""
    try:
        import grp  # noqa: PLC0415 - POSIX only
        import pwd  # noqa: PLC0415

        group, user = grp.getgrgid(gid), pwd.getpwuid(uid)
    except (ImportError, KeyError):
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def untrusted_folder(owner: Owner, uid: int) -> str | None:
    """Why a directory searched for a config file ends the search (and a config file in it
    is not read); None: search on. Owned by the user or root, writable by its owner only (or
    its owner's private group): whoever else can write it can put a ``ringtrain.toml`` there,
    or a link to one, sticky bit or not."""
    if owner.uid not in (uid, 0):
        return f"its directory is owned by {_user(owner.uid)}, not by you or root"
    if owner.mode & stat.S_IWOTH:
        return f"its directory is writable by anyone (mode {owner.mode:04o})"
    if owner.mode & stat.S_IWGRP and not _private_group(owner.uid, owner.gid):
        return f"its directory is writable by group {_group(owner.gid)} (mode {owner.mode:04o})"
    return None


def untrusted_dir(owner: Owner, uids: Collection[int],
                  groups: Collection[int] = ()) -> str | None:
    """Why a directory on the way to a run directory lets someone else than the user, root
    and the members of ``groups`` (named as trusted by the user) rename what it holds, so
    swap the run directory; None: it does not. As OpenSSH's StrictModes judges the folders
    above authorized_keys: owned by one of ``uids``, writable by its owner only (or its
    owner's private group), except that a sticky one (/tmp) may be writable by all: there
    only an entry's owner can rename it, and the next directory down is judged too."""
    if owner.uid not in uids:
        return f"it is owned by {_user(owner.uid)}, not by you or root"
    if owner.mode & stat.S_ISVTX:
        return None
    if owner.mode & stat.S_IWOTH:
        return f"anyone can write it (mode {owner.mode:04o}, no sticky bit)"
    if owner.mode & stat.S_IWGRP and owner.gid not in groups and not _private_group(
            owner.uid, owner.gid):
        return f"group {_group(owner.gid)} can write it (mode {owner.mode:04o})"
    return None


def dir_fix(path: str, owner: Owner, uids: Collection[int]) -> str:
    """The fix for a directory ``untrusted_dir`` refused."""
    elsewhere = "pass --runs-dir with a directory of your own"
    if owner.uid not in uids:
        return f"{elsewhere} (or have {path} owned by you or root, writable by its owner only)"
    if owner.mode & stat.S_IWGRP and not owner.mode & stat.S_IWOTH:
        group = _group_name(owner.gid)
        return (f"chmod g-w {path} (or chmod +t {path}: then members cannot move each "
                f"other's entries), {elsewhere}, or add --trust-group {group} if you trust "
                f"every member of {group} with the jobs you launch")
    return f"chmod o-w {path} (or chmod +t {path}, as /tmp is), or {elsewhere}"


def fix_for(path: Path, uid: int) -> str:
    return (f"if you trust it: chown {user_name(uid)} {path} && chmod go-w {path}; "
            "otherwise remove it or run from another directory")


def _group(gid: int) -> str:
    name = _group_name(gid)
    return f"{name} (gid {gid})" if name != str(gid) else f"gid {gid}"


def _group_name(gid: int) -> str:
    try:
        import grp  # noqa: PLC0415 - POSIX only, and only to name the group

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return str(gid)


def user_name(uid: int) -> str:
    """The user's name (as chown takes it), else the number."""
    try:
        import pwd  # noqa: PLC0415 - POSIX only, and only to name the owner

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _user(uid: int) -> str:
    try:
        import pwd  # noqa: PLC0415 - POSIX only, and only to name the owner

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
