"""OpenSSH's ssh_config rules, evaluated here for the settings the probe reads.

``ssh -G`` re-reads the whole config for every host: with a ``Host`` stanza per host, N hosts
cost N x N lines (about 30 ms of CPU per host at 10,000 stanzas, SCALE.md). ``Rules`` reads the
files once, indexes the stanzas whose patterns are plain names, and for each host walks only
the stanzas that can apply, in file order, with OpenSSH's rules: the first value wins
(IdentityFile and CertificateFile add up, duplicates dropped), ``Host`` patterns with ``*``,
``?`` and ``!``, ``Match host/originalhost/user/localuser/all`` against the values set so
far, ``Include`` (glob, ``~``, relative to ~/.ssh, or /etc/ssh for the system's file).

Anything else raises ``Unsupported`` and the caller asks ``ssh -G`` (remote/sshg.py, which also
checks a sample of hosts against ``ssh -G`` before trusting the rest): ``Match exec``,
``canonical``, ``final``, ``CanonicalizeHostname``, ``Include`` inside a block, ``%`` tokens
other than HostName's ``%h``, ``none`` values, quotes or backslashes in a value, upper case in
a host name or a ``Match`` pattern. Whatever keyword the probe does not read is left to
OpenSSH, which validates every line once (the same lines are read for every host).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIELDS = ("hostname", "user", "port", "identityfile", "identitiesonly", "certificatefile",
          "userknownhostsfile", "globalknownhostsfile", "stricthostkeychecking",
          "connecttimeout", "proxycommand", "proxyjump", "hostkeyalias")
_FIRST = {"hostname", "user", "port", "identitiesonly", "userknownhostsfile",
          "globalknownhostsfile", "stricthostkeychecking", "connecttimeout", "hostkeyalias"}
_ADDED = {"identityfile", "certificatefile"}
_STRICT = {"yes": "true", "no": "false", "off": "false", "ask": "ask", "accept-new": "accept-new"}
_YESNO = {"yes": "yes", "no": "no"}
_MATCHERS = {"host", "originalhost", "user", "localuser"}
_PLAIN_HOST = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
_TOKEN = re.compile(r'"([^"]*)"(?=\s|$)|([^\s"]+)')


class Unsupported(Exception):
    """A construct these rules do not model: ask ``ssh -G``."""


@dataclass(frozen=True, slots=True)
class Line:
    key: str  # lower case
    args: tuple[str, ...]
    rest: str  # the raw text after the keyword (ProxyCommand's value)
    where: str  # file:line


@dataclass(frozen=True, slots=True)
class Block:
    """Lines under one condition: ``top`` (before a file's first Host/Match), ``host``
    (patterns) or ``match`` (criteria as (name, negated, patterns))."""

    kind: str
    patterns: tuple[str, ...]
    criteria: tuple[tuple[str, bool, tuple[str, ...]], ...]
    lines: tuple[Line, ...]


def split_line(text: str, where: str) -> Line | None:
    """One ssh_config line as (keyword, arguments), ``None`` for blanks and comments."""
    text = text.strip()
    if not text or text.startswith("#"):
        return None
    m = re.match(r"([A-Za-z]+)(?:\s*=\s*|\s+)(.*)\Z", text)
    if m is None:
        raise Unsupported(f"{where}: not `Keyword value`")
    key, rest = m.group(1).lower(), m.group(2).strip()
    if "\\" in rest or "'" in rest or "#" in rest:
        raise Unsupported(f"{where}: backslash, quote or # in the value")
    args = []
    for tok in _TOKEN.finditer(rest):
        args.append(tok.group(1) if tok.group(1) is not None else tok.group(2))
    if "".join(_TOKEN.sub("", rest).split()):
        raise Unsupported(f"{where}: quotes not around a whole word")
    return Line(key, tuple(args), rest, where)


def load(roots: list[tuple[Path, Path]], home: str) -> list[Block]:
    """The blocks of ``roots`` (file, folder its relative Includes name), Includes expanded;
    ``home``: what ``~`` means (OpenSSH's: the password database's, not $HOME)."""
    blocks: list[Block] = []
    for path, base in roots:
        _read(path, base, home, blocks, depth=0)
    return blocks


def _read(path: Path, base: Path, home: str, out: list[Block], depth: int) -> None:
    if depth > 8:
        raise Unsupported(f"{path}: Include nested too deep")
    try:
        text = path.read_text()
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as err:
        raise Unsupported(f"{path}: {err}") from err
    head: Block | None = Block("top", (), (), ())
    lines: list[Line] = []

    def close() -> None:
        if head is not None and lines:
            out.append(Block(head.kind, head.patterns, head.criteria, tuple(lines)))
        lines.clear()

    for n, raw in enumerate(text.splitlines(), 1):
        line = split_line(raw, f"{path}:{n}")
        if line is None:
            continue
        if line.key == "include":
            if head is None or head.kind != "top":
                raise Unsupported(f"{line.where}: Include inside a Host or Match block")
            close()
            _include(line, base, home, out, depth)
        elif line.key == "host":
            close()
            head = Block("host", _host_patterns(line), (), ())
        elif line.key == "match":
            close()
            head = Block("match", (), _criteria(line), ())
        else:
            if line.key == "canonicalizehostname":
                raise Unsupported(f"{line.where}: CanonicalizeHostname")
            lines.append(line)
    close()


def _include(line: Line, base: Path, home: str, out: list[Block], depth: int) -> None:
    for arg in line.args:
        if "%" in arg or "$" in arg or (arg.startswith("~") and not arg.startswith("~/")):
            raise Unsupported(f"{line.where}: tokens or ~user in Include")
        name = home + arg[1:] if arg.startswith("~/") else arg
        name = name if os.path.isabs(name) else str(base / name)
        for found in sorted(glob.glob(name)):
            _read(Path(found), base, home, out, depth + 1)


def _host_patterns(line: Line) -> tuple[str, ...]:
    if not line.args or any("," in p or "%" in p for p in line.args):
        raise Unsupported(f"{line.where}: Host patterns")
    return line.args


def _criteria(line: Line) -> tuple[tuple[str, bool, tuple[str, ...]], ...]:
    args = [a.lower() if i % 2 == 0 else a for i, a in enumerate(line.args)]
    if args == ["all"]:
        return ()
    if len(args) % 2 or not args:
        raise Unsupported(f"{line.where}: Match criteria")
    out = []
    for criterion, value in zip(args[::2], args[1::2], strict=True):
        negated, name = criterion.startswith("!"), criterion.lstrip("!")
        if name not in _MATCHERS or value != value.lower() or "%" in value:
            raise Unsupported(f"{line.where}: Match {name}")
        out.append((name, negated, tuple(value.split(","))))
    return tuple(out)


_RX: dict[str, re.Pattern[str]] = {}


def match_pattern(text: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: ``*`` any run, ``?`` one character, the rest literal."""
    rx = _RX.get(pattern)
    if rx is None:
        rx = _RX[pattern] = re.compile(
            "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
            + r"\Z", re.S)
    return rx.match(text) is not None


def match_list(text: str, patterns: tuple[str, ...]) -> bool:
    """A pattern list: no if a ``!pattern`` matches, else yes if any other does."""
    hit = False
    for p in patterns:
        if p.startswith("!"):
            if match_pattern(text, p[1:]):
                return False
        elif match_pattern(text, p):
            hit = True
    return hit


class Rules:
    """Evaluate ``blocks`` for one host at a time; ``defaults``: ``ssh -G``'s answer (parsed)
    with an empty config, for what no line sets; ``local_user``, ``home``: for Match
    localuser, the default user and ``~`` in known_hosts paths."""

    def __init__(self, blocks: list[Block], defaults: dict[str, Any], local_user: str,
                 home: str) -> None:
        self.blocks, self.defaults, self.local_user, self.home = blocks, defaults, local_user, home
        self._always: list[int] = []
        self._named: dict[str, list[int]] = {}
        for i, b in enumerate(blocks):
            if b.kind == "host" and all(_PLAIN_HOST.match(p) for p in b.patterns):
                for p in dict.fromkeys(b.patterns):
                    self._named.setdefault(p, []).append(i)
            else:
                self._always.append(i)

    def resolve(self, host: str) -> tuple[dict[str, Any], tuple[int, ...]]:
        """(the fields of ``ssh -G host`` that FIELDS names, the generic blocks that applied)."""
        if not _PLAIN_HOST.match(host):
            raise Unsupported(f"host name {host!r}")
        named = self._named.get(host, ())
        order = sorted({*self._always, *named}) if named else self._always
        got: dict[str, Any] = {"identityfile": [], "certificatefile": []}
        trace = []
        for i in order:
            block = self.blocks[i]
            if not self._applies(block, host, got):
                continue
            if i not in named:
                trace.append(i)
            for line in block.lines:
                self._apply(line, got)
        return self._answer(host, got), tuple(trace)

    def _applies(self, block: Block, host: str, got: dict[str, Any]) -> bool:
        if block.kind == "top":
            return True
        if block.kind == "host":
            return match_list(host, block.patterns) if any(
                not p.startswith("!") for p in block.patterns) else False
        ok = True
        for name, negated, patterns in block.criteria:
            if name == "host":
                subject = _hostname(got.get("hostname"), host)
            elif name == "originalhost":
                subject = host
            elif name == "user":
                subject = got.get("user", self.local_user)
            else:
                subject = self.local_user
            if match_list(subject, patterns) == negated:
                ok = False
        return ok

    def _apply(self, line: Line, got: dict[str, Any]) -> None:
        key, args = line.key, line.args
        if key not in FIELDS:
            return  # OpenSSH validates it (sshg checks); the probe does not read it
        if key == "proxycommand":
            value = line.rest.split("=", 1)[-1].strip() if line.rest.startswith("=") else line.rest
            if value.lower() == "none" or '"' in value:
                raise Unsupported(f"{line.where}: ProxyCommand {value}")
            got.setdefault("proxy", ("proxycommand", value))
            return
        if len(args) != 1 and key not in ("userknownhostsfile", "globalknownhostsfile"):
            raise Unsupported(f"{line.where}: {key} with {len(args)} values")
        if any(a.lower() == "none" for a in args) or not args:
            raise Unsupported(f"{line.where}: {key} none")
        if key in _ADDED:
            if "%" in args[0].replace("%h", ""):
                raise Unsupported(f"{line.where}: tokens in {key}")
            if args[0] not in got[key]:
                got[key].append(args[0])
            return
        if key == "proxyjump":
            if "ssh://" in args[0] or "%" in args[0]:
                raise Unsupported(f"{line.where}: ProxyJump {args[0]}")
            got.setdefault("proxy", ("proxyjump", args[0]))
            return
        got.setdefault(key, self._value(key, args, line))

    def _value(self, key: str, args: tuple[str, ...], line: Line) -> str:
        """A first-value-wins keyword's value as ``ssh -G`` prints it."""
        value = " ".join(args)
        if key == "hostname":
            if "%" in value.replace("%h", "").replace("%%", "") or value != value.lower():
                raise Unsupported(f"{line.where}: HostName {value}")
        elif key in ("port", "connecttimeout"):
            if not value.isdigit() or int(value) == 0:
                raise Unsupported(f"{line.where}: {key} {value}")
            value = str(int(value))
        elif key == "stricthostkeychecking":
            value = _mapped(_STRICT, value, line)
        elif key == "identitiesonly":
            value = _mapped(_YESNO, value, line)
        elif key == "hostkeyalias":
            pass  # printed as written (OpenSSH expands no token in it)
        elif "%" in value or (key == "globalknownhostsfile" and "~" in value):
            raise Unsupported(f"{line.where}: tokens in {key}")
        elif key == "userknownhostsfile":
            value = " ".join(self.home + a[1:] if a.startswith("~/") else a for a in args)
            if "~" in value:
                raise Unsupported(f"{line.where}: ~ in {key}")
        return value

    def _answer(self, host: str, got: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"_openssh": True}
        for key in FIELDS:
            if key in _ADDED:
                value: Any = got[key] or self.defaults.get(key)
            elif key == "hostname":
                value = _hostname(got.get("hostname"), host).lower()
            elif key in ("proxycommand", "proxyjump"):
                proxy = got.get("proxy")
                value = proxy[1] if proxy and proxy[0] == key else None
            else:
                value = got.get(key, self.defaults.get(key))
            if value is not None:
                out[key] = value
        return out


def _hostname(value: str | None, host: str) -> str:
    if value is None:
        return host
    return value.replace("%%", "\0").replace("%h", host).replace("\0", "%")


def _mapped(table: dict[str, str], value: str, line: Line) -> str:
    if value.lower() not in table:
        raise Unsupported(f"{line.where}: {line.key} {value}")
    return table[value.lower()]
