"""Defaults without flags, read once for both doors: ``ringtrain.toml`` in the project, the
user's config file, and ``RINGTRAIN_<KEY>`` environment variables (the keys, their types and
the layering are ``assembly/layers.py``'s, pure).

``load`` reads the layers; ``layered`` fills the options a caller did not give, the same for
``ringtrain launch`` (cli/defaults.py, after click's default_map) and ``ringtrain.run()``
(api.py), and checks that a file a layer names is there, naming the layer when it is not.

A file is flat TOML (``hosts = "gpu.txt"``, ``stall_timeout = 900``); an unknown key or a
value of the wrong type is an error that names the file, the key and the fix. A relative path
in a file is taken from the file's folder; ``env_file`` names a file of NAME=value lines.

Trust (ringtrain/trust.py): a file is read only when it is owned by the user or root and
writable by its owner only, judged on the file opened (a link at its end read, never followed
by the open) and read from that same descriptor, so a link switched between a trusted file and
another's is read as whichever it was when opened; ``env_file`` the same. The upward search
opens each folder and judges its descriptor: it stops at a directory owned by someone else or
writable by others (a config file in it skipped), at ``$HOME`` and at the repository root (a
folder with ``.git``). Keys that run code (``CODE_KEYS``) are taken only from a file the user
owns. What was skipped, and why, is in ``Config.skipped``: every command warns about it and
``ringtrain config`` lists it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringtrain import trust
from ringtrain.assembly.layers import (
    CODE_KEYS,
    KEYS,
    PROJECT_FILE,
    Config,
    EnvEntry,
    Setting,
    Skipped,
    env_lines,
    fill,
    from_environment,
    from_file,
    merge_env,
)
from ringtrain.errors import UsageError
from ringtrain.spec import EnvSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["KEYS", "PROJECT_FILE", "Config", "EnvEntry", "Setting", "Skipped", "layered",
           "load", "user_file"]

MAX_FILE_BYTES = 1 << 20  # a config file or an env_file
_FOLDER = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # search rights only


def user_file(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "ringtrain" / "config.toml"


def load(cwd: Path, environ: Mapping[str, str], uid: int | None = None) -> Config:
    """Every key set somewhere, with the source that wins (the caller aside), the variables
    for the ranks, and the files (or keys) skipped as untrusted."""
    uid = os.geteuid() if uid is None else uid
    skipped: list[Skipped] = []
    user = _open_judged(user_file(environ), uid, skipped)
    project = _find_project(cwd, environ, uid, skipped)
    found: dict[str, Setting] = {}
    env: list[tuple[tuple[EnvSpec, ...], str]] = []
    for file in (user, project):  # lowest first
        if file is None or file.data is None:
            continue
        values = _trusted_values(file, uid, skipped)
        if "env_file" in values:
            env.append((_env_file(values["env_file"], file.path, uid, skipped), str(file.path)))
        for key in ("env", "env_plain"):  # one name in both: env_plain's, as written later
            if key in values:
                env.append((values[key], str(file.path)))
        for key, value in values.items():
            found[key] = Setting(key, value, str(file.path))
    found.update(from_environment(environ))
    return Config(found, project.path if project else None, tuple(skipped), merge_env(env))


def layered(given: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """``fill``: the caller's options over the layers; then a file a layer named (the hosts,
    the ssh_config) is checked to be there, the error naming the layer."""
    out = fill(given, config)
    for key in ("hosts", "ssh_config"):
        setting = config.settings.get(key)
        param = KEYS[key].param
        if setting is None or given.get(param) is not None or out.get(param) != setting.value:
            continue
        path = Path(str(setting.value))
        if key == "hosts" and not path.exists() and any(c in str(path) for c in ":,"):
            continue  # a host list
        if not path.exists():
            raise UsageError(
                f"{setting.source}: {key} names {path}, which does not exist",
                "a relative path in a config file is taken from that file's folder: fix it "
                f"there, or pass {'--hosts FILE or -H h1:N' if key == 'hosts' else '-F FILE'}"
                " on the command line")
    return out


@dataclass(frozen=True, slots=True)
class _File:
    """A config file opened once: the owner and mode of what was opened, and its bytes
    (None: skipped as untrusted, the reason in ``skipped``)."""

    path: Path
    owner: trust.Owner
    data: bytes | None


def _find_project(cwd: Path, environ: Mapping[str, str], uid: int,
                  skipped: list[Skipped]) -> _File | None:
    """The nearest ``ringtrain.toml`` from ``cwd`` up. Each folder is opened and judged on
    its descriptor, and the file opened through it: a folder owned by someone else or
    writable by others ends the search (a config file there is skipped, named in
    ``skipped``), as do ``$HOME`` and the repository root (a folder with ``.git``)."""
    home = Path(environ["HOME"]).absolute() if environ.get("HOME") else None
    for folder in (cwd, *cwd.parents):
        candidate = folder / PROJECT_FILE
        try:
            dir_fd = os.open(folder, _FOLDER)
        except OSError:
            return None  # a folder we cannot enter holds nothing we read
        try:
            owner = trust.Owner.of(os.fstat(dir_fd))
            reason = trust.untrusted_folder(owner, uid)
            if reason is not None:
                if _entry(PROJECT_FILE, dir_fd):
                    skipped.append(Skipped(candidate, reason, hint=_folder_fix(folder, uid)))
                return None
            found = _open_judged(candidate, uid, skipped, dir_fd)
            if found is not None:
                return found
            if folder == home or _entry(".git", dir_fd):
                return None
        finally:
            os.close(dir_fd)
    return None


def _entry(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _folder_fix(folder: Path, uid: int) -> str:
    return (f"if only you (or root) should write {folder}: chown {trust.user_name(uid)} "
            f"{folder} && chmod go-w {folder}; otherwise run from a directory of your own, or "
            "put the settings in your own config file (ringtrain config shows where)")


def _open_judged(path: Path, uid: int, skipped: list[Skipped],
                 dir_fd: int | None = None) -> _File | None:
    """``path`` (its name in ``dir_fd`` when given) opened once (``trust.open_file``), judged
    on what was opened and, when trusted, read from that descriptor; None when there is
    none."""
    try:
        fd, owner = trust.open_file(path.name if dir_fd is not None else path, dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the config file: {err.strerror or err}",
                         "fix its permissions, or remove it if it is not a config file") from None
    try:
        reason = trust.untrusted_file(owner, uid)
        if reason is not None:
            skipped.append(Skipped(path, reason))
            return _File(path, owner, None)
        return _File(path, owner, trust.read_open(fd, MAX_FILE_BYTES))
    except OSError as err:
        raise UsageError(f"{path}: cannot read the config file: {err.strerror or err}",
                         f"a config file is flat key = value lines (at most {MAX_FILE_BYTES} "
                         "bytes): fix it or remove it") from None
    finally:
        os.close(fd)


def _trusted_values(file: _File, uid: int, skipped: list[Skipped]) -> dict[str, Any]:
    assert file.data is not None
    values = from_file(_parse_toml(file.data, file.path), file.path)
    code = tuple(k for k in values if k in CODE_KEYS)
    if code and file.owner.uid != uid:
        skipped.append(Skipped(file.path, "these keys run programs and the file is not yours "
                               "(it is root's)", code))
        values = {k: v for k, v in values.items() if k not in CODE_KEYS}
    return values


def _env_file(path: Path, named_by: Path, uid: int, skipped: list[Skipped]) -> tuple[EnvSpec,
                                                                                      ...]:
    """The variables of an ``env_file`` (trusted as a config file is, judged on the file
    opened and read from it)."""
    try:
        fd, owner = trust.open_file(path)
    except OSError as err:
        raise UsageError(f"{named_by}: env_file names {path}, which cannot be read: "
                         f"{err.strerror or err}",
                         "a relative env_file is taken from the config file's folder: fix it "
                         "there, or create the file (NAME=value lines)") from None
    try:
        reason = trust.untrusted_file(owner, uid)
        if reason is not None or owner.uid != uid:
            skipped.append(Skipped(path, reason or "it sets the ranks' environment and is not "
                                   "yours (it is root's)"))
            return ()
        text = trust.read_open(fd, MAX_FILE_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} (env_file of {named_by}): cannot read it: {err}",
                         "fix its permissions, or drop env_file") from None
    finally:
        os.close(fd)
    return env_lines(text, f"{path} (env_file of {named_by})")


def _parse_toml(data: bytes, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: cannot read the config file: {err}",
                         "save it as UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}",
                         'write flat key = value lines, e.g. runs_dir = "/scratch/runs"') from None
