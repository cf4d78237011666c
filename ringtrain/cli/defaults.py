"""Defaults without flags: ``ringtrain.toml`` in the project, the user's config file, and
``RINGTRAIN_<KEY>`` environment variables.

Precedence, highest first: the command line, the environment (``RINGTRAIN_RUNS_DIR=...``),
the project's ``ringtrain.toml`` (the working directory or the nearest parent holding one),
the user's ``$XDG_CONFIG_HOME/ringtrain/config.toml`` (``~/.config/...``), then the built-in
default. The values become click's ``default_map`` for every command that has the option,
so ``--help`` shows them and the command line still wins. ``ringtrain config`` shows each
key's value and where it came from.

A file is flat TOML (``hosts = "gpu.txt"``, ``stall_timeout = 900``); an unknown key or a
value of the wrong type is an error that names the file, the key and the fix.

Trust (ringtrain/trust.py): a file is read only when it is owned by the user or root and
writable by its owner only; the upward search stops at a directory owned by someone else, at
``$HOME`` and at the repository root (a folder with ``.git``). Keys that run code
(``CODE_KEYS``) are taken only from a file the user owns. What was skipped, and why, is in
``Config.skipped``: every command warns about it and ``ringtrain config`` lists it.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ringtrain import trust
from ringtrain.errors import UsageError
from ringtrain.rank import envvars

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROJECT_FILE = "ringtrain.toml"
ENV_PREFIX = envvars.PREFIX  # RINGTRAIN_<KEY>, e.g. RINGTRAIN_RUNS_DIR

# key -> (the click parameter it fills, its type, what it is)
KEYS: dict[str, tuple[str, type, str]] = {
    "hosts": ("hosts_file", str, "inventory (--hosts)"),
    "hosts_format": ("hosts_format", str, "inventory format (--hosts-format)"),
    "ssh_config": ("ssh_config", Path, "ssh_config file (-F)"),
    "known_hosts": ("known_hosts", Path, "known_hosts file (--known-hosts)"),
    "ssh_transport": ("ssh_transport", str, "paramiko or openssh (--ssh-transport)"),
    "runs_dir": ("runs_dir", Path, "where run directories go (--runs-dir)"),
    "python": ("python", str, "Python on the hosts (--python)"),
    "network_interface": ("network_interface", str, "interface or CIDR (--network-interface)"),
    "checkpoint": ("checkpoint_url", str, "checkpoint URL (--checkpoint)"),
    "max_restarts": ("max_restarts", int, "restarts (--max-restarts)"),
    "start_timeout": ("start_timeout", float, "seconds to start (--start-timeout)"),
    "stall_timeout": ("stall_timeout", float, "seconds without progress (--stall-timeout)"),
    "heartbeat_timeout": ("heartbeat_timeout", float, "seconds of silence (--heartbeat-timeout)"),
    "exit_grace": ("exit_grace", float, "seconds to exit after the script (--exit-grace)"),
    "on_bad_host": ("on_bad_host", tuple, 'what a bad host does (--on-bad-host), a list or '
                    '"exclude,xid=warn"'),
}


# keys whose value runs a program: the interpreter on the hosts, ssh's ProxyCommand and
# friends, an executable inventory (a discovery script)
CODE_KEYS = frozenset({"python", "ssh_config", "hosts"})


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    value: Any
    source: str  # the variable name, the file path, or "built-in default"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A config file (or some of its keys) not read, and why."""

    path: Path
    reason: str
    keys: tuple[str, ...] = ()  # empty: the whole file

    def describe(self) -> str:
        what = f"{', '.join(self.keys)} from {self.path}" if self.keys else str(self.path)
        return f"skipped {what}: {self.reason}"

    def fix(self, uid: int) -> str:
        if self.keys:
            return f"set {', '.join(self.keys)} in your own config file or on the command line"
        return trust.fix_for(self.path, uid)


@dataclass(frozen=True, slots=True)
class Config:
    settings: dict[str, Setting]
    project: Path | None
    skipped: tuple[Skipped, ...] = ()


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
    """Every key set somewhere, with the source that wins (the command line aside), and the
    files (or keys) skipped as untrusted."""
    uid = os.geteuid() if uid is None else uid
    project, skipped_project = project_file(cwd, environ, uid)
    found: dict[str, Setting] = {}
    skipped = [skipped_project] if skipped_project is not None else []
    for path in (user_file(environ), project):
        if path is None or not path.is_file():
            continue
        owner = trust.stat_of(path)
        reason = trust.untrusted_file(owner, uid) if owner is not None else "unreadable"
        if reason is not None:
            skipped.append(Skipped(path, reason))
            continue
        values = _read_file(path)
        code = tuple(k for k in values if k in CODE_KEYS)
        if code and owner is not None and owner.uid != uid:
            skipped.append(Skipped(path, "these keys run programs and the file is not yours "
                                   "(it is root's)", code))
            values = {k: v for k, v in values.items() if k not in CODE_KEYS}
        for key, value in values.items():
            found[key] = Setting(key, value, str(path))
    for key in KEYS:
        name = ENV_PREFIX + key.upper()
        if environ.get(name):
            found[key] = Setting(key, _convert(key, environ[name], name), name)
    return Config(found, project, tuple(skipped))


def default_map(settings: Mapping[str, Setting], command: click.Command) -> dict[str, Any]:
    """click's default_map for ``command``: the settings whose parameter it has, and the same
    for each sub-command of a group (``ringtrain runs show``)."""
    by_param = {KEYS[k][0]: s.value for k, s in settings.items()}
    out: dict[str, Any] = {
        p.name: by_param[p.name] for p in command.params if p.name in by_param
    }
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            nested = default_map(settings, sub)
            if nested:
                out[name] = nested
    return out


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: cannot read the config file: {err}",
                         "fix its permissions or remove it") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}",
                         'write flat key = value lines, e.g. runs_dir = "/scratch/runs"') from None
    out = {}
    for key, value in data.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            raise UsageError(
                f"{path}: unknown key {key!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                f"known keys: {', '.join(KEYS)}",
            )
        out[key] = _convert(key, value, f"{path}: {key}")
    return out


def _convert(key: str, value: Any, where: str) -> Any:
    kind = KEYS[key][1]
    try:
        if kind is Path:
            return Path(str(value)).expanduser()
        if kind is int and not isinstance(value, bool):
            return int(value)
        if kind is float and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str | int | float):
            return str(value)
        if kind is tuple and isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if kind is tuple and isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    except (TypeError, ValueError):
        pass
    what = {Path: "a path", int: "an integer", float: "a number", str: "a string",
            tuple: "a list of strings"}[kind]
    raise UsageError(
        f"{where}: {value!r} is not {what}",
        f"{key} is the {KEYS[key][2]}",
    )
