"""One status line of a launch as a value, and its two renderings. PURE.

``runs/<id>/events.log`` keeps the line as people read it (local time, then the text);
``runs/<id>/events.jsonl`` holds the same event as one JSON object a line, for log shippers:
``ts`` (ISO-8601, UTC, milliseconds), ``level`` (INFO or WARNING), ``message`` (the text of
the events.log line), ``run_id`` and ``attempt`` (null where no attempt is known). Both lines
come from one ``Event``, so the two files always say the same thing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone

__all__ = ["Event", "is_warning"]


def is_warning(text: str) -> bool:
    """A status line that still shows under ``-q``: a warning (``warning: ...``, ``ring check:
    warning: ...``) or what the teardown found."""
    return text.startswith(("warning", "teardown")) or ": warning:" in text


@dataclass(frozen=True, slots=True)
class Event:
    ts: float  # seconds since the epoch (time.time())
    text: str
    run_id: str
    attempt: int | None = None

    @property
    def level(self) -> str:
        return "WARNING" if is_warning(self.text) else "INFO"

    def log_line(self) -> str:
        """The events.log line: the local time to the second, the text."""
        return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(self.ts))} {self.text}\n"

    def to_json(self) -> dict[str, object]:
        stamp = datetime.fromtimestamp(self.ts, tz=timezone.utc)
        return {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": self.level,
            "message": self.text,
            "run_id": self.run_id,
            "attempt": self.attempt,
        }

    def json_line(self) -> str:
        """The events.jsonl line: one object, one line (newlines and non-ASCII escaped)."""
        return json.dumps(self.to_json()) + "\n"
