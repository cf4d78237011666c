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
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

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
    "runs_dir": ("runs_dir", Path, "where run directories go (--runs-dir)"),
    "python": ("python", str, "Python on the hosts (--python)"),
    "network_interface": ("network_interface", str, "interface or CIDR (--network-interface)"),
    "checkpoint": ("checkpoint_url", str, "checkpoint URL (--checkpoint)"),
    "max_restarts": ("max_restarts", int, "restarts (--max-restarts)"),
    "start_timeout": ("start_timeout", float, "seconds to start (--start-timeout)"),
    "stall_timeout": ("stall_timeout", float, "seconds without progress (--stall-timeout)"),
    "heartbeat_timeout": ("heartbeat_timeout", float, "seconds of silence (--heartbeat-timeout)"),
    "exit_grace": ("exit_grace", float, "seconds to exit after the script (--exit-grace)"),
}


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    value: Any
    source: str  # the variable name, the file path, or "built-in default"


def user_file(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "ringtrain" / "config.toml"


def project_file(cwd: Path) -> Path | None:
    for folder in (cwd, *cwd.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
    return None


def load(cwd: Path, environ: Mapping[str, str]) -> dict[str, Setting]:
    """Every key set somewhere, with the source that wins (the command line aside)."""
    found: dict[str, Setting] = {}
    for path in (user_file(environ), project_file(cwd)):
        if path is not None and path.is_file():
            for key, value in _read_file(path).items():
                found[key] = Setting(key, value, str(path))
    for key in KEYS:
        name = ENV_PREFIX + key.upper()
        if environ.get(name):
            found[key] = Setting(key, _convert(key, environ[name], name), name)
    return found


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
    except (TypeError, ValueError):
        pass
    what = {Path: "a path", int: "an integer", float: "a number", str: "a string"}[kind]
    raise UsageError(
        f"{where}: {value!r} is not {what}",
        f"{key} is the {KEYS[key][2]}",
    )
