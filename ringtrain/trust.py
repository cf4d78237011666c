"""Which files ringtrain may trust: decided from a file's owner and mode, as OpenSSH's
StrictModes and git's ``safe.directory`` decide. PURE but for ``stat_of`` (one ``os.stat``).

ringtrain often runs as root on machines other people share. A config file, a discovery
script or a project directory that another user can write is a way for that user to run
commands as whoever launches: so such a file is skipped (config) or refused (a script), with
the reason and the fix. Trusted: owned by the user or by root, and writable by its owner
only (or by its owner's private group too: Debian's umask 002). Settings that run code
(``python``, ``ssh_config``, a discovery script named by ``hosts``) are taken only from files
the user owns. The directories down to a run directory are judged the same way
(``untrusted_dir``): whoever can write one of them can swap the run directory.
"""

from __future__ import annotations

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
    """Why a directory searched for a config file ends the search; None: search on."""
    if owner.uid not in (uid, 0):
        return f"its directory is owned by {_user(owner.uid)}, not by you or root"
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
    return (f"if you trust it: chown {_user(uid)} {path} && chmod go-w {path}; "
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


def _user(uid: int) -> str:
    try:
        import pwd  # noqa: PLC0415 - POSIX only, and only to name the owner

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
