"""The run directory: runs/<id>/ with the job's logs, plan.json, hostfile, result.json."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from ringtrain.errors import SetupError

__all__ = ["make_run_dir"]


def make_run_dir(run_dir: Path) -> None:
    """Create the run directory, or say plainly why it cannot be (before anything starts).

    It holds the job's logs, plan and hostfile: created 0700 and never through a link, in a
    runs directory that belongs to the user or root (a world-writable one must be sticky, as
    /tmp is), so another user can neither read it nor swap it for a directory of theirs."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        _refuse_foreign_parent(run_dir.parent)
        with contextlib.suppress(FileExistsError):  # a restart's second call, the dry run's
            os.mkdir(run_dir, 0o700)
        st = os.lstat(run_dir)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise SetupError(
                f"the run directory {run_dir} is a link, not a directory, or not yours",
                "remove it (another user may have planted it) or pass another --runs-dir",
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(run_dir, 0o700)
        probe = run_dir / f".writable-{secrets.token_hex(4)}"
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
        probe.unlink()
    except OSError as err:
        raise SetupError(
            f"cannot use the run directory {run_dir}: {err.strerror or err}",
            "pass --runs-dir DIR with a directory you can write (logs, plan.json, result.json "
            "and default checkpoints go there)",
        ) from None


def _refuse_foreign_parent(runs_dir: Path) -> None:
    st = os.stat(runs_dir)  # the directory a link leads to is what counts
    uid = os.geteuid()
    # a team's group-writable directory is the team's choice; a world-writable one
    # without the sticky bit lets anyone rename our directory away
    shared = st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX
    if st.st_uid not in (uid, 0) or shared:
        why = "belongs to another user" if st.st_uid not in (uid, 0) else (
            "is writable by everyone without the sticky bit")
        raise SetupError(
            f"the runs directory {runs_dir} {why}: they could read or replace the job's logs "
            "and plan",
            "pass --runs-dir with a directory of your own",
        )
