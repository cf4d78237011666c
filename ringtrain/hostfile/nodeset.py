"""Slurm-style host lists (``gpu[01-04,07]``) and host patterns. Pure.

Expansion follows ``scontrol show hostnames`` (checked with Slurm 22.05 by
tests/integration/test_inventory_oracles.py): numeric ranges and lists in brackets, zero padding
from the width of a range's first number (``a[08-10]``: a08 a09 a10), several bracket groups in
Slurm's own order (the last group varies fastest, then the others from the first: ``x[1-2]y[1-2]
z[1-2]`` is x1y1z1 x1y1z2 x2y1z1 x2y1z2 x1y2z1 ...), duplicates kept. Stepped ranges
(``a[1-10:2]``), empty or reversed ranges and spaces in brackets are refused, as scontrol refuses
them (or, for spaces, reads them oddly). One deliberate extension: text after the last bracket
(``gpu[01-04].cluster.example``), which scontrol refuses but FQDN clusters need; ``compress``
writes such lists. This module also bounds the size, compresses names back into lists without
reordering them, and holds the pattern language of ``--include``/``--exclude``.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_HOSTS = 10_000
_MAX_BRACKETS = 8
# A bracket holding numeric ranges, as opposed to an fnmatch character class like [abc].
_RANGE_BRACKET_RE = re.compile(r"\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]")
_NUMBERED_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>\D*)$")
_RANGE_RE = re.compile(r"(?P<lo>\d+)(?:-(?P<hi>\d+))?")
_STEP_RE = re.compile(r"(?P<lo>\d+)-(?P<hi>\d+):(?P<step>\d+)")
_STEP_SHOWN = 16


class HostListError(ValueError):
    """A malformed host list; callers turn it into InventoryError or AllocationError.

    ``hint``, when set, is a fix specific to this list (e.g. a stepped range written out).
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


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
    """Expand a host list (``a[1-3,5],b``, commas outside brackets separate items) in Slurm's
    order, duplicates kept. Raises HostListError for what ``scontrol show hostnames`` refuses."""
    names: list[str] = []
    for item, _ in split_items(expr):
        if not item:
            continue  # Slurm skips empty items: 'a,,b' and 'a[1-2],' are fine
        names.extend(_expand_item(item, MAX_HOSTS - len(names)))
    return tuple(names)


def _expand_item(item: str, room: int) -> list[str]:
    texts, groups = _split_brackets(item)
    values = [_group_values(body, item) for body in groups]
    total = math.prod(len(v) for v in values)
    if total > room:
        raise HostListError(f"expands to more than {MAX_HOSTS} hosts")
    if not groups:
        return [item]
    # Slurm's order: the last group varies fastest; before it, the first group varies
    # fastest and the one just before the last slowest (hostlist.c expands the prefix's
    # groups from the right, then the last range).
    order = [*range(len(groups) - 2, -1, -1), len(groups) - 1]
    names = []
    for combo in itertools.product(*(values[i] for i in order)):
        chosen = dict(zip(order, combo, strict=True))
        names.append(texts[0] + "".join(chosen[i] + texts[i + 1] for i in range(len(groups))))
    return names


def _split_brackets(item: str) -> tuple[list[str], list[str]]:
    """``a[1-2]b[3]c`` -> texts ``['a', 'b', 'c']`` and bracket bodies ``['1-2', '3']``."""
    if item.count("[") > _MAX_BRACKETS:
        raise HostListError(f"more than {_MAX_BRACKETS} bracket groups")
    if any(c.isspace() for c in item):
        raise HostListError("contains a space")
    texts: list[str] = []
    groups: list[str] = []
    at = 0
    while (start := item.find("[", at)) >= 0:
        stray = item.find("]", at, start)
        end = item.find("]", start + 1)
        if stray >= 0:
            raise HostListError("unbalanced brackets: ']' without '['")
        if end < 0:
            raise HostListError("unbalanced brackets: '[' without ']'")
        if item.find("[", start + 1, end) >= 0:
            raise HostListError("nested brackets")
        texts.append(item[at:start])
        groups.append(item[start + 1 : end])
        at = end + 1
    if "]" in item[at:]:
        raise HostListError("unbalanced brackets: ']' without '['")
    texts.append(item[at:])
    return texts, groups


def _group_values(body: str, item: str) -> list[str]:
    """The numbers one bracket group lists, each padded to its range's first number."""
    values: list[str] = []
    for piece in body.split(","):
        step = _STEP_RE.fullmatch(piece)
        if step is not None:
            raise HostListError(
                f"stepped range {piece!r}: Slurm host lists have no steps (scontrol refuses "
                f"'{item}')",
                _step_hint(item, body, piece, step),
            )
        m = _RANGE_RE.fullmatch(piece)
        if m is None:
            raise HostListError(f"bad range {piece!r} in [{body}]" if piece else
                                f"bad range: empty range in [{body}]")
        lo, hi = m.group("lo"), m.group("hi") or m.group("lo")
        if int(hi) < int(lo):
            raise HostListError(f"bad range {piece!r}: start > stop")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise HostListError(f"range too large: {piece!r} is more than {MAX_HOSTS} hosts")
        values.extend(f"{n:0{len(lo)}d}" for n in range(int(lo), int(hi) + 1))
        if len(values) > MAX_HOSTS:
            raise HostListError(f"[{body}] lists more than {MAX_HOSTS} numbers")
    return values


def _step_hint(item: str, body: str, piece: str, step: re.Match[str]) -> str:
    lo, hi, by = int(step.group("lo")), int(step.group("hi")), int(step.group("step"))
    numbers = range(lo, hi + 1, by) if by > 0 and hi >= lo else range(0)
    width = len(step.group("lo"))
    listed = [f"{n:0{width}d}" for n in numbers]
    if not listed or len(listed) > _STEP_SHOWN:
        return "list the numbers instead, e.g. gpu[01,03,05,07]"
    pieces = [",".join(listed) if p == piece else p for p in body.split(",")]
    return f"list the numbers instead: {item.replace(f'[{body}]', '[' + ','.join(pieces) + ']', 1)}"


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
