"""The rank entry runs a script again in the same process when a registered hook asks for it
(``ringtrain.rank.rerun``: the seam ringtrain.keras.memory uses after a reset), and only then."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, sys
from ringtrain.rank import rerun
runs = sys.modules.setdefault("runs", type(sys)("runs"))
runs.n = getattr(runs, "n", 0) + 1
class WorldChanged(Exception):
    pass
rerun.register(lambda exc: type(exc).__name__ == "WorldChanged" and "again" in str(exc))
print(f"run {runs.n} pid {os.getpid()} argv {sys.argv[1:]}", flush=True)
sys.argv.append("mutated")  # each run gets the original argv
if runs.n < 3:
    raise WorldChanged("again")
if sys.argv[1] == "fail":
    raise WorldChanged("not this one")
"""


def _entry(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGTRAIN_")}
    return subprocess.run([sys.executable, "-m", "ringtrain.rank.entry", str(script), *args],
                          capture_output=True, text=True, timeout=60, check=False, env=env)


def test_the_script_runs_again_in_the_same_process_when_a_hook_asks(tmp_path: Path) -> None:
    proc = _entry(tmp_path, "ok")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(" pid ")[0] for line in lines] == ["run 1", "run 2", "run 3"]
    assert len({line.split(" pid ")[1].split()[0] for line in lines}) == 1
    assert all(line.endswith("argv ['ok']") for line in lines)


def test_an_error_no_hook_claims_ends_the_rank_with_its_traceback(tmp_path: Path) -> None:
    proc = _entry(tmp_path, "fail")
    assert proc.returncode == 1
    assert proc.stdout.count("run ") == 3
    assert "WorldChanged: not this one" in proc.stderr
