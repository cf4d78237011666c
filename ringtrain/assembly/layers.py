"""The defaults without flags, as values: the keys a config file or ``RINGTRAIN_<KEY>`` may
set, each value checked and typed once, and how the layers fill the options a caller did not
give. PURE: reading the files is ``assembly/settings.py``'s; both doors (``ringtrain launch``
and ``ringtrain.run()``) call ``fill`` through it.

Precedence, highest first: what the caller gave (the command line, or ``ringtrain.run()``'s
keyword arguments), the environment (``RINGTRAIN_RUNS_DIR=...``), the project's
``ringtrain.toml``, the user's ``config.toml``, then the built-in default. A path in a config
file is taken from that file's folder (``hosts = "hosts/gpu.txt"`` works from any
sub-directory); a path in the environment from the working directory, as one typed there.
``env`` and ``env_file`` (variables for every rank) are read from files only and merged by
name, under the caller's ``--env``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringtrain import trust
from ringtrain.errors import UsageError
from ringtrain.hostfile import FORMATS
from ringtrain.probe.doctor_policy import parse_on_bad_host
from ringtrain.rank import envvars
from ringtrain.spec import EnvSpec

PROJECT_FILE = "ringtrain.toml"
ENV_PREFIX = envvars.PREFIX  # RINGTRAIN_<KEY>, e.g. RINGTRAIN_RUNS_DIR


@dataclass(frozen=True, slots=True)
class Key:
    """One config key: the option it fills (a LaunchOptions field, the click parameter's
    name), its kind, what it is, and the bounds the command line would check."""

    param: str
    kind: str  # str, path, hosts, url, int, float, list, env
    means: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()


KEYS: dict[str, Key] = {
    "hosts": Key("hosts_file", "hosts", "inventory (--hosts)"),
    "hosts_format": Key("hosts_format", "str", "inventory format (--hosts-format)",
                        choices=FORMATS),
    "ssh_config": Key("ssh_config", "path", "ssh_config file (-F)"),
    "known_hosts": Key("known_hosts", "path", "known_hosts file (--known-hosts)"),
    "ssh_transport": Key("ssh_transport", "str", "paramiko or openssh (--ssh-transport)",
                         choices=("paramiko", "openssh")),
    "runs_dir": Key("runs_dir", "path", "where run directories go (--runs-dir)"),
    "trust_groups": Key("trust_groups", "list",
                        "groups trusted to write the runs directory (--trust-group)"),
    "python": Key("python", "str", "Python on the hosts (--python)"),
    "network_interface": Key("network_interface", "str",
                             "interface or CIDR (--network-interface)"),
    "checkpoint": Key("checkpoint_url", "url", "checkpoint URL (--checkpoint)"),
    "max_restarts": Key("max_restarts", "int", "restarts (--max-restarts)", minimum=0),
    "start_timeout": Key("start_timeout", "float", "seconds to start (--start-timeout)",
                         minimum=1),
    "stall_timeout": Key("stall_timeout", "float",
                         "seconds without progress (--stall-timeout)", minimum=1),
    "heartbeat_timeout": Key("heartbeat_timeout", "float",
                             "seconds of silence (--heartbeat-timeout)", minimum=2),
    "exit_grace": Key("exit_grace", "float",
                      "seconds to exit after the script (--exit-grace)", minimum=1),
    "on_bad_host": Key("on_bad_host", "list",
                       'what a bad host does (--on-bad-host), a list or "exclude,xid=warn"'),
    "env": Key("env", "env", 'variables for every rank (--env), secrets: a table NAME = "value" '
               'or a list of "NAME=value"; file only'),
    "env_plain": Key("env", "env", "variables for every rank that are not secret "
                     "(--env-plain), shown and in the launch command's environment; as env"),
    "env_file": Key("env_file", "path", "a file of NAME=value lines for every rank; file only"),
}

# keys read from config files only: RINGTRAIN_ENV_FILE is the ranks' own variable
FILE_ONLY = frozenset({"env", "env_plain", "env_file"})

# keys whose value runs a program: the interpreter on the hosts, ssh's ProxyCommand and
# friends, an executable inventory (a discovery script), LD_PRELOAD and PYTHONPATH; and
# trust_groups, which lets others swap the directory the launcher runs programs from
CODE_KEYS = frozenset({"python", "ssh_config", "hosts", "env", "env_plain", "env_file",
                       "trust_groups"})

# the options that name the hosts: one given by the caller sets the configured ones aside
HOST_SOURCE = ("hosts_file", "host_spec")


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    value: Any
    source: str  # the variable name, or the file path


@dataclass(frozen=True, slots=True)
class EnvEntry:
    """One variable for the ranks from a config file's ``env`` or ``env_file``."""

    spec: EnvSpec
    source: str  # the file that named it

    def masked(self) -> str:
        """As shown: the name, never the value."""
        if self.spec.value is None:
            return self.spec.name
        return f"{self.spec.name}={self.spec.value if self.spec.plain else '****'}"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A config file (or some of its keys) not read, and why."""

    path: Path
    reason: str
    keys: tuple[str, ...] = ()  # empty: the whole file
    hint: str = ""  # the fix, when not the file's own (its folder's, say)

    def describe(self) -> str:
        what = f"{', '.join(self.keys)} from {self.path}" if self.keys else str(self.path)
        return f"skipped {what}: {self.reason}"

    def fix(self, uid: int) -> str:
        if self.hint:
            return self.hint
        if self.keys:
            return f"set {', '.join(self.keys)} in your own config file or on the command line"
        return trust.fix_for(self.path, uid)


@dataclass(frozen=True, slots=True)
class Config:
    """Every layer read: the winning setting per key (the caller aside), the variables for
    the ranks merged by name, and what was skipped as untrusted."""

    settings: Mapping[str, Setting]
    project: Path | None
    skipped: tuple[Skipped, ...] = ()
    env: tuple[EnvEntry, ...] = ()


def fill(given: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """The options to use, by LaunchOptions field: what the caller gave (a None counts as not
    given), then each setting for an option it did not give. A host source the caller gave
    (``-H`` or ``--hosts``) sets the configured ``hosts`` and ``hosts_format`` aside; the
    configured ``env`` goes under the caller's, name by name."""
    out = {name: value for name, value in given.items() if value is not None}
    host_given = any(name in out for name in HOST_SOURCE)
    for key, setting in config.settings.items():
        param = KEYS[key].param
        if key in FILE_ONLY or param in out:
            continue
        if host_given and key in ("hosts", "hosts_format"):
            out[param] = None  # the caller's source wins, not "both given"
            continue
        out[param] = setting.value
    if config.env:
        own = tuple(out.get("env") or ())
        named = {e.name for e in own}
        out["env"] = (*(e.spec for e in config.env if e.spec.name not in named), *own)
    return out


def from_environment(environ: Mapping[str, str]) -> dict[str, Setting]:
    """``RINGTRAIN_<KEY>`` for every key a variable may set; paths as typed (the working
    directory's)."""
    out = {}
    for key in KEYS:
        name = ENV_PREFIX + key.upper()
        if key not in FILE_ONLY and environ.get(name):
            out[key] = Setting(key, convert(key, environ[name], name, None), name)
    return out


def from_file(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A parsed config file's keys, checked and typed, paths taken from ``path``'s folder;
    an unknown key names the closest known one."""
    out = {}
    for key, value in data.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            raise UsageError(
                f"{path}: unknown key {key!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                f"known keys: {', '.join(KEYS)}",
            )
        out[key] = convert(key, value, f"{path}: {key}", path.parent)
    return out


def convert(key: str, value: Any, where: str, base: Path | None) -> Any:
    """``value`` as the option takes it; ``where`` names the layer (file and key, or the
    variable) in the error; ``base`` is the config file's folder (None: the environment)."""
    spec = KEYS[key]
    if spec.kind == "env":
        return env_table(value, where, plain=key == "env_plain")
    out = _typed(spec.kind, value, base)
    if out is None:
        what = {"path": "a path", "hosts": "a path or host list", "url": "a path or URL",
                "int": "an integer", "float": "a number", "str": "a string",
                "list": "a list of strings"}[spec.kind]
        raise UsageError(f"{where}: {value!r} is not {what}", f"{key} is the {spec.means}")
    if spec.minimum is not None and out < spec.minimum:
        raise UsageError(f"{where}: {out} is below the least allowed, {spec.minimum:g}",
                         f"{key} is the {spec.means}")
    if spec.choices and out not in spec.choices:
        raise UsageError(f"{where}: {out!r} is not one of {', '.join(spec.choices)}",
                         f"{key} is the {spec.means}")
    if key == "on_bad_host":
        try:
            parse_on_bad_host(out)
        except UsageError as err:
            raise UsageError(f"{where}: {err.message}", err.hint) from None
    return out


def _typed(kind: str, value: Any, base: Path | None) -> Any:
    """``value`` of ``kind``, or None when it is not one."""
    if kind in ("int", "float", "str"):
        scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
        return _scalar(kind, value) if scalar else None
    if kind == "list":
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else [1]
        words = [v for item in items if isinstance(item, str) for v in item.split(",")]
        strings = all(isinstance(item, str) for item in items)
        return tuple(w.strip() for w in words if w.strip()) if strings else None
    if not isinstance(value, str) or not value:
        return None
    if kind == "path":
        return _from(base, Path(value).expanduser())
    if kind == "hosts":
        return _hosts(value, base)
    plain = base is not None and "://" not in value and value[0] != "~"
    return str(_from(base, Path(value))) if plain else value  # a URL stays as written


def _scalar(kind: str, value: str | int | float) -> Any:
    try:
        if kind == "int":
            return int(value) if float(value) == int(value) else None
        return float(value) if kind == "float" else str(value)
    except (TypeError, ValueError):
        return None


def _from(base: Path | None, path: Path) -> Path:
    return path if base is None or path.is_absolute() else base / path


def _hosts(value: str, base: Path | None) -> str:
    """A config file's ``hosts``: a path from the file's folder, or a host list as it is
    (``gpu01:4,gpu02:4``, as ``--hosts`` takes one when there is no such file)."""
    path = Path(value).expanduser()
    if base is None or path.is_absolute():
        return str(path) if base is not None else value
    if any(c in value for c in ":,") and not (base / path).exists():
        return value
    return str(base / path)


def env_table(value: Any, where: str, plain: bool = False) -> tuple[EnvSpec, ...]:
    """``env = {NAME = "value"}`` or ``env = ["NAME=value", "NAME"]`` (a bare NAME forwards
    the launcher's value); ``env_plain`` the same, values not secret (``plain``). Errors name
    the variable, never its value."""
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [(v.partition("=")[0], v.partition("=")[2] if "=" in v else None) for v in value]
    else:
        raise UsageError(f"{where}: not a table or a list of strings",
                         'write env = { NAME = "value" } or env = ["NAME=value"]')
    out = []
    for name, text in items:
        if not isinstance(text, str | None) or isinstance(text, bool):
            raise UsageError(f"{where}: {name}: its value is not a string",
                             f'quote it: {name} = "..."')
        out.append(_env_spec(str(name), text, where, plain))
    return tuple(out)


def env_lines(text: str, where: str) -> tuple[EnvSpec, ...]:
    """An env file (``.deepspeed_env``'s form): one NAME=value a line; blank lines and
    ``#`` comments skipped, ``export`` allowed. Errors name the line, never its value."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, eq, value = line.partition("=")
        if not eq:
            raise UsageError(f"{where}:{number}: not a NAME=value line",
                             "write one NAME=value a line (# starts a comment)")
        out.append(_env_spec(name.strip(), value, f"{where}:{number}"))
    return tuple(out)


def _env_spec(name: str, value: str | None, where: str, plain: bool = False) -> EnvSpec:
    try:
        return EnvSpec(name, value, plain)
    except UsageError:
        raise UsageError(f"{where}: {name!r} is not a valid environment variable name",
                         "names are letters, digits and _, not starting with a digit") from None


def merge_env(layers: Iterable[tuple[tuple[EnvSpec, ...], str]]) -> tuple[EnvEntry, ...]:
    """The variables of every layer, lowest first, by name: a later layer's value wins."""
    merged: dict[str, EnvEntry] = {}
    for specs, source in layers:
        for spec in specs:
            merged.pop(spec.name, None)
            merged[spec.name] = EnvEntry(spec, source)
    return tuple(merged.values())


def shown(value: Any) -> str:
    """A setting's value as ``ringtrain config`` shows it."""
    return ",".join(value) if isinstance(value, tuple) else str(value)
