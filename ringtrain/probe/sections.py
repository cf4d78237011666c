"""The probe output's frame: its delimited sections, and how remote text is clipped. PURE."""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN = "@@ringtrain:begin "
END = "@@ringtrain:end "
HEADER = "@@ringtrain:probe 1@@"
DONE = "@@ringtrain:done@@"
INT_RE = re.compile(r"[0-9]{1,15}")  # ASCII digits only: str.isdigit() also takes '²'
# what nvidia-smi prints in a field it has no value for (both parsers read it so)
NO_VALUE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""})
_SHOWN = 300  # characters of one line of remote text kept in a message
# characters of one line of host output a parser reads (the longest real line in the golden
# captures: 6,657); the rest of a longer line is cut before any pattern sees it, so what a
# host prints costs the launcher time in proportion to its size whatever it holds
MAX_LINE = 16 * 1024


def host_lines(text: str) -> list[str]:
    """The lines of host output, each cut to ``MAX_LINE`` characters."""
    return [line[:MAX_LINE] for line in text.splitlines()]


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    body: str
    exit_code: int | None  # None: the section never ended (output cut off)


def split_sections(text: str) -> dict[str, Section]:
    """Cut the probe output into its sections, each line cut to ``MAX_LINE``; text before the
    header (a chatty bashrc) is ignored."""
    sections: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    for line in host_lines(text):
        if line.startswith(BEGIN) and line.endswith("@@"):
            name, lines = line[len(BEGIN):-2], []
        elif line.startswith(END) and line.endswith("@@") and name is not None:
            code = line[len(END):-2]
            sections[name] = Section(name, "\n".join(lines),
                                     int(code) if INT_RE.fullmatch(code) else None)
            name = None
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = Section(name, "\n".join(lines), None)
    return sections


def clip(text: str, limit: int = _SHOWN) -> str:
    """Remote text as shown in a message: at most ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
