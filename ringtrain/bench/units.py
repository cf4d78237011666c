"""Parsing of benchmark arguments: sizes (``4K..256M``, ``4K,64M``) and integer lists."""

from __future__ import annotations

import re

from ringtrain.errors import UsageError

_SIZE_RE = re.compile(r"^(\d+)([KMG]?)(i?B)?$", re.IGNORECASE)
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``'64M'`` -> 67108864 (binary units; a multiple of 4: float32 elements)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise UsageError(f"size {text!r} is not a number with an optional K, M or G",
                         "write sizes like 4K, 64M or 1G (binary units)")
    size = int(m.group(1)) * _UNIT[m.group(2).upper()]
    if size < 4 or size % 4:
        raise UsageError(f"size {text!r} is not a positive multiple of 4 bytes",
                         "buffers hold float32 values: use a multiple of 4")
    return size


def parse_sizes(text: str, factor: int = 4) -> tuple[int, ...]:
    """``'4K..256M'`` -> 4K, 16K, ..., 256M (times ``factor``); ``'4K,1M'`` -> those two."""
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo > hi:
            raise UsageError(f"sizes {text!r}: the range runs backwards", "write e.g. 4K..256M")
        sizes = [lo]
        while sizes[-1] * factor <= hi:
            sizes.append(sizes[-1] * factor)
        return tuple(sizes)
    return tuple(sorted({parse_size(t) for t in text.split(",") if t.strip()}))


def parse_ints(text: str, what: str, lo: int = 1, hi: int = 64) -> tuple[int, ...]:
    """``'2,4,8'`` or ``'2..8'`` (every integer) -> a sorted tuple within [lo, hi]."""
    try:
        if ".." in text:
            a, b = (int(x) for x in text.split("..", 1))
            values = set(range(a, b + 1))
        else:
            values = {int(x) for x in text.split(",") if x.strip()}
    except ValueError as err:
        raise UsageError(f"{what} {text!r} is not a list of integers",
                         f"write e.g. 2,4,8 or 2..8 for {what}") from err
    if not values or min(values) < lo or max(values) > hi:
        raise UsageError(f"{what} {text!r} must lie within {lo}..{hi}",
                         f"pass {what} between {lo} and {hi}")
    return tuple(sorted(values))
