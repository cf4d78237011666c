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
writable by its owner only; the upward search stops at a directory owned by someone else, at
``$HOME`` and at the repository root (a folder with ``.git``). Keys that run code
(``CODE_KEYS``) are taken only from a file the user owns. What was skipped, and why, is in
``Config.skipped``: every command warns about it and ``ringtrain config`` lists it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
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
           "load", "project_file", "user_file"]


def user_file(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "ringtrain" / "config.toml"


def project_file(
    cwd: Path, environ: Mapping[str, str], uid: int
) -> tuple[Path | None, Skipped | None]:
    """The nearest ``ringtrain.toml`` from ``cwd`` up, searching no further than a directory
    owned by someone else, ``$HOME`` or the repository root; (None, why) when the nearest one
    is not to be trusted."""
    home = Path(environ["HOME"]).absolute() if environ.get("HOME") else None
    for folder in (cwd, *cwd.parents):
        owner = trust.stat_of(folder)
        reason = trust.untrusted_folder(owner, uid) if owner is not None else "unreadable"
        candidate = folder / PROJECT_FILE
        if reason is not None:
            found = candidate.is_file()
            return None, Skipped(candidate, reason) if found else None
        if candidate.is_file():
            return candidate, None
        if folder == home or (folder / ".git").exists():
            break
    return None, None


def load(cwd: Path, environ: Mapping[str, str], uid: int | None = None) -> Config:
    """Every key set somewhere, with the source that wins (the caller aside), the variables
    for the ranks, and the files (or keys) skipped as untrusted."""
    uid = os.geteuid() if uid is None else uid
    project, skipped_project = project_file(cwd, environ, uid)
    found: dict[str, Setting] = {}
    skipped = [skipped_project] if skipped_project is not None else []
    env: list[tuple[tuple[EnvSpec, ...], str]] = []
    for path in (user_file(environ), project):  # lowest first
        if path is None or not path.is_file():
            continue
        values = _trusted_values(path, uid, skipped)
        if "env_file" in values:
            env.append((_env_file(values["env_file"], path, uid, skipped), str(path)))
        if "env" in values:
            env.append((values["env"], str(path)))
        for key, value in values.items():
            found[key] = Setting(key, value, str(path))
    found.update(from_environment(environ))
    return Config(found, project, tuple(skipped), merge_env(env))


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


def _trusted_values(path: Path, uid: int, skipped: list[Skipped]) -> dict[str, Any]:
    owner = trust.stat_of(path)
    reason = trust.untrusted_file(owner, uid) if owner is not None else "unreadable"
    if reason is not None:
        skipped.append(Skipped(path, reason))
        return {}
    values = from_file(_read_toml(path), path)
    code = tuple(k for k in values if k in CODE_KEYS)
    if code and owner is not None and owner.uid != uid:
        skipped.append(Skipped(path, "these keys run programs and the file is not yours "
                               "(it is root's)", code))
        values = {k: v for k, v in values.items() if k not in CODE_KEYS}
    return values


def _env_file(path: Path, named_by: Path, uid: int, skipped: list[Skipped]) -> tuple[EnvSpec,
                                                                                      ...]:
    """The variables of an ``env_file`` (trusted as a config file is)."""
    owner = trust.stat_of(path)
    if owner is None:
        raise UsageError(f"{named_by}: env_file names {path}, which cannot be read",
                         "a relative env_file is taken from the config file's folder: fix it "
                         "there, or create the file (NAME=value lines)")
    reason = trust.untrusted_file(owner, uid)
    if reason is not None or owner.uid != uid:
        skipped.append(Skipped(path, reason or "it sets the ranks' environment and is not "
                               "yours (it is root's)"))
        return ()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} (env_file of {named_by}): cannot read it: {err}",
                         "fix its permissions, or drop env_file") from None
    return env_lines(text, f"{path} (env_file of {named_by})")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: cannot read the config file: {err}",
                         "fix its permissions or remove it") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}",
                         'write flat key = value lines, e.g. runs_dir = "/scratch/runs"') from None
