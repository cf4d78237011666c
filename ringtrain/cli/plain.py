"""Text read from files and hosts (run directories, manifests, a sim's state, what a rank
printed), shown on a terminal: never rich markup (a planted ``[/x]`` would end the command
with a MarkupError, ``[link=...]`` would render as a link) and never a control sequence (an
ESC in a log line would drive the terminal). PURE."""

from __future__ import annotations

import click
from rich.text import Text


def printable(text: object) -> str:
    """``text`` with every character that is not printable (ESC, other controls, a newline)
    as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def cell(text: object, style: str = "") -> Text:
    """A table cell of file or host text: printable, and literal (a Text is never markup)."""
    return Text(printable(text), style=style)


def echo(text: str, err: bool = False) -> None:
    """``click.echo`` of a line or lines built from file or host text, each line printable."""
    click.echo("\n".join(printable(line) for line in text.split("\n")), err=err)
