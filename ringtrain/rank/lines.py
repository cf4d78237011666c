"""Whole lines out of a rank, whatever the script writes: progress bars become log lines.

Keras's ``verbose=1`` progress bar (and tqdm) redraws one line with backspaces and carriage
returns, flushing after every update. Under ``mpirun --tag-output`` each flushed chunk gets a
``[1,0]<stdout>:`` tag, so the redraws tore lines apart: raw tags in the middle of the console
and the epoch's metrics in the launcher's log instead of the rank's. ``LineStream`` wraps
``sys.stdout``/``sys.stderr`` in the rank and writes only whole lines: text erased by ``\\b`` or
overwritten after ``\\r`` is dropped, so a bar's final state ("32/32 [===] - 1s - loss: ...")
reaches the log as one line. A bar redrawn for longer than ``redraw_every_s`` without a newline
is written out as a line of its own (long epochs still show their progress). Standard library
only, like the rest of ``ringtrain.rank``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO


class LineStream:
    """A text stream that passes whole lines to ``target`` (every other attribute forwards)."""

    def __init__(self, target: TextIO, redraw_every_s: float = 30.0) -> None:
        self._target = target
        self._line: list[str] = []
        self._redrawn = False  # the pending text replaced earlier text (a bar update)
        self._sealed = False  # ... and was flushed: the bar's update is complete
        self._last_out = time.monotonic()
        self._redraw_every_s = redraw_every_s
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            out = []
            if self._sealed and text and text[0] not in "\r\b\n":
                # another print while a bar is on screen (a callback's message): the bar's
                # state so far is a line of its own, and the message starts a new one
                out.append("".join(self._line) + "\n")
                self._line.clear()
                self._redrawn = False
            self._sealed = False
            out += self._feed(text)
            if self._redrawn and self._line and (
                time.monotonic() - self._last_out > self._redraw_every_s
            ):
                out.append("".join(self._line) + "\n")  # a long-running bar: show its state
                self._line.clear()
                self._redrawn = False
            if out:
                self._target.write("".join(out))
                self._target.flush()
                self._last_out = time.monotonic()
        return len(text)

    def _feed(self, text: str) -> list[str]:
        if not text:  # print(end=""): nothing to add, and no blank line at exit
            return []
        if "\r" not in text and "\b" not in text:  # the usual case: plain text
            head, sep, tail = text.rpartition("\n")
            if not sep:
                self._line.append(text)
                return []
            done = "".join(self._line) + head + "\n"
            self._line[:] = [tail] if tail else []
            self._redrawn = False
            return [done]
        out: list[str] = []
        for ch in text:
            if ch == "\n":
                out.append("".join(self._line) + "\n")
                self._line.clear()
                self._redrawn = False
            elif ch == "\r":
                self._line.clear()
                self._redrawn = True
            elif ch == "\b":
                if self._line:
                    self._line.pop()
                self._redrawn = True
            else:
                self._line.append(ch)
        return out

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Whole lines were written already; a partial line waits for its end."""
        with self._lock:
            self._sealed = self._redrawn and bool(self._line)
            self._target.flush()

    def drain(self) -> None:
        """Before the process ends: the partial line too, as a line."""
        with self._lock:
            if self._line:
                self._target.write("".join(self._line) + "\n")
                self._line.clear()
            self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)
