"""Which files ringtrain may trust: decided from a file's owner and mode, as OpenSSH's
StrictModes and git's ``safe.directory`` decide. PURE but for ``stat_of`` (one ``os.stat``).

ringtrain often runs as root on machines other people share. A config file, a discovery
script or a project directory that another user can write is a way for that user to run
commands as whoever launches: so such a file is skipped (config) or refused (a script), with
the reason and the fix. Trusted: owned by the user or by root, and writable by its owner
only (or by its owner's private group too: Debian's umask 002). Settings that run code
(``python``, ``ssh_config``, a discovery script named by ``hosts``) are taken only from files
the user owns.
"""

from __future__ import annotations

import os
import stat
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


def fix_for(path: Path, uid: int) -> str:
    return (f"if you trust it: chown {_user(uid)} {path} && chmod go-w {path}; "
            "otherwise remove it or run from another directory")


def _user(uid: int) -> str:
    try:
        import pwd  # noqa: PLC0415 - POSIX only, and only to name the owner

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
