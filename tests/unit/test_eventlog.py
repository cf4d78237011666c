"""events.log and events.jsonl render one Event: the same text, the time in both, the level."""

from __future__ import annotations

import json
import time

from hypothesis import given
from hypothesis import strategies as st

from ringtrain.launch.record.eventlog import Event, is_warning

TS = 1_767_225_600.25  # 2026-01-01T00:00:00.250Z


def test_the_json_line_names_time_level_text_run_and_attempt() -> None:
    line = Event(TS, "attempt 2: 4 ranks on 2 host(s)", "20260101-000000-ab12", 2).json_line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == {
        "ts": "2026-01-01T00:00:00.250Z", "level": "INFO",
        "message": "attempt 2: 4 ranks on 2 host(s)", "run_id": "20260101-000000-ab12",
        "attempt": 2,
    }


def test_an_unknown_attempt_is_null() -> None:
    assert json.loads(Event(TS, "run r; run dir d", "r").json_line())["attempt"] is None


def test_the_log_line_is_local_time_then_the_text() -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(TS))
    assert Event(TS, "job succeeded", "r", 1).log_line() == f"{stamp} job succeeded\n"


def test_warnings_are_the_lines_quiet_still_shows() -> None:
    for text in ("warning: rank 0 never called hvd.init()",
                 "ring check: warning: keeping slow host(s) gpu02 (pair 2.1 GB/s)",
                 "teardown: gpu02: processes still running: 4242 python"):
        assert is_warning(text) and Event(TS, text, "r").level == "WARNING"
    for text in ("attempt 1: 2 ranks on 1 host(s)", "job succeeded in 3.0 s",
                 "ring check: no slow host or link"):
        assert not is_warning(text) and Event(TS, text, "r").level == "INFO"


@given(st.text(), st.integers(min_value=1, max_value=10**6) | st.none())
def test_any_text_is_one_json_line_that_reads_back(text: str, attempt: int | None) -> None:
    line = Event(TS, text, "r", attempt).json_line()
    assert line.isascii() and line.splitlines() == [line[:-1]]  # one line for any splitter
    back = json.loads(line)
    assert back["message"] == text and back["attempt"] == attempt
