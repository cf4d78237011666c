"""docs/THREAT_MODEL.md names the tests that keep each defence: every test file and test
function it names exists (a renamed or removed test cannot leave a defence unguarded in the
text)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docs" / "THREAT_MODEL.md").read_text()
TESTS = {p.name: p for p in (ROOT / "tests").rglob("test_*.py")}


def test_every_test_file_the_threat_model_names_exists() -> None:
    named = set(re.findall(r"`(?:tests/(?:unit|integration)/)?(test_\w+\.py)", TEXT))
    assert named and sorted(named - set(TESTS)) == []


def test_every_test_function_the_threat_model_names_exists() -> None:
    named = set(re.findall(r"`(test_\w+)`", TEXT))
    defined = {m for p in TESTS.values() for m in re.findall(r"def (test_\w+)", p.read_text())}
    assert named and sorted(named - defined) == []
