"""Slurm-style host lists (``gpu[01-04,07]``) and host patterns. Pure.

Expansion is python-hostlist's (the grammar Slurm and ClusterShell share); this module adds
the limits a launcher needs (bounded size, no deep recursion), order-preserving compression
for rendering, and the pattern language of ``--include``/``--exclude``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

import hostlist

MAX_HOSTS = 10_000
_MAX_BRACKETS = 8
# A bracket holding numeric ranges, as opposed to an fnmatch character class like [abc].
_RANGE_BRACKET_RE = re.compile(r"\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]")
_NUMBERED_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>\D*)$")


class HostListError(ValueError):
    """A malformed host list; callers turn it into InventoryError or AllocationError."""


def split_items(text: str, separators: str = ",") -> list[tuple[str, int]]:
    """Split ``text`` at ``separators`` outside brackets: ``(item, offset)`` pairs, offsets from 0.

    Empty items between two separators are kept so callers can point at them.
    """
    items: list[tuple[str, int]] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif char in separators and depth == 0:
            items.append((text[start:i], start))
            start = i + 1
    items.append((text[start:], start))
    return items


def is_host_list(expr: str) -> bool:
    """True for ``prefix[ranges]...``; a leading ``[`` is a bracketed IPv6 address instead."""
    return "[" in expr and not expr.startswith("[")


def expand(expr: str) -> tuple[str, ...]:
    """Expand one host list expression, in written order, duplicates kept."""
    if expr.count("[") > _MAX_BRACKETS:
        raise HostListError(f"more than {_MAX_BRACKETS} bracket groups")
    try:
        names = hostlist.expand_hostlist(expr, allow_duplicates=True)
    except (hostlist.BadHostlist, ValueError, RecursionError) as err:
        raise HostListError(str(err) or "malformed host list") from None
    if len(names) > MAX_HOSTS:
        raise HostListError(f"expands to {len(names)} hosts, more than {MAX_HOSTS}")
    return tuple(names)


def compress(names: Sequence[str]) -> tuple[str, ...]:
    """Host list expressions that expand back to exactly ``names``, in the same order.

    Unlike ``hostlist.collect_hostlist`` this never sorts: ring order is meaningful.
    """
    out: list[str] = []
    run: list[tuple[str, str, str]] = []
    for name in names:
        parts = _numbered(name)
        if run and parts is not None and _extends(run, parts):
            run.append(parts)
            continue
        out.extend(_render_run(run))
        run = [parts] if parts is not None else []
        if parts is None:
            out.append(name)
    out.extend(_render_run(run))
    return tuple(out)


def _numbered(name: str) -> tuple[str, str, str] | None:
    m = _NUMBERED_RE.match(name)
    if m is None or not m.group("prefix") or ":" in name:
        return None
    return m.group("prefix"), m.group("num"), m.group("suffix")


def _extends(run: list[tuple[str, str, str]], parts: tuple[str, str, str]) -> bool:
    prefix, num, suffix = run[-1]
    return parts[0] == prefix and parts[2] == suffix and int(parts[1]) > int(num)


def _render_run(run: list[tuple[str, str, str]]) -> list[str]:
    if not run:
        return []
    prefix, _, suffix = run[0]
    if len(run) == 1:
        return [prefix + run[0][1] + suffix]
    ranges: list[list[str]] = []
    for _, num, _ in run:
        last = ranges[-1] if ranges else None
        if last is not None and _continues(last, num):
            last[1:] = [num]
        else:
            ranges.append([num])
    body = ",".join("-".join(r) for r in ranges)
    return [f"{prefix}[{body}]{suffix}"]


def _continues(current: list[str], num: str) -> bool:
    """Whether ``num`` extends range ``current`` (``[low]`` or ``[low, high]``) as written."""
    low, high = current[0], current[-1]
    width = len(low)
    return int(num) == int(high) + 1 and f"{int(num):0{width}d}" == num


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One ``--include``/``--exclude`` value: comma-separated globs and host lists."""

    text: str
    names: frozenset[str]
    globs: tuple[str, ...]

    def matches(self, name: str) -> bool:
        return name in self.names or any(fnmatch.fnmatchcase(name, g) for g in self.globs)


def parse_pattern(text: str) -> HostPattern:
    """``gpu0*``, ``gpu[01-04,07]``, ``10.0.0.*,gpu09``; raises HostListError when malformed."""
    names: set[str] = set()
    globs: list[str] = []
    for raw, _ in split_items(text.strip()):
        item = raw.strip()
        if not item:
            raise HostListError(f"empty item in pattern {text!r}")
        if _RANGE_BRACKET_RE.search(item) and not item.startswith("["):
            names.update(expand(item))
        elif item.startswith("[") and ":" in item:
            names.add(item.strip("[]"))
        else:
            globs.append(item)
    return HostPattern(text=text, names=frozenset(names), globs=tuple(globs))
