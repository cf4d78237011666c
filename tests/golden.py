"""Golden files: compare text with tests/unit/golden/<name>; RINGTRAIN_UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "unit" / "golden"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("RINGTRAIN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"golden file {path} missing; run with RINGTRAIN_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"output differs from {path}"
