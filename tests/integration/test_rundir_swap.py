"""A real launch whose run directory another user swaps while the job runs (issue 40).

``horovodrun --elastic`` runs the attempt's ``discover-hosts`` every second for the whole job,
so a planted one used to run as root within a second of the swap; ``result.json.tmp`` used to
overwrite a root-owned file through a planted link. The user trusts the group that can write
the runs directory (``--trust-group``), one member swaps the run directory mid-job (``nobody``,
in a forked child): the job still ends well, the planted programs never run, no link is
followed, and everything the launcher writes is in its own directory, moved aside.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.procs import killed_on_failure
from tests.unit.test_rundir import NOBODY, NOGROUP, _swap, as_nobody

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")]

WAIT = """import os, sys, time
go = sys.argv[1]
open(go + ".started", "w").close()
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.1)
print("rank done", os.path.exists(go))
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="rt-swap-", dir="/tmp"))
    try:
        top.chmod(0o711)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_run_directory_swapped_mid_job_runs_nothing_planted(shared: Path) -> None:
    runs = shared / "team" / "runs"
    runs.mkdir(parents=True)
    os.chown(runs, 0, NOGROUP)
    runs.chmod(0o775)
    secret, marker, go = shared / "secret", shared / "planted-ran", shared / "go"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    (shared / "wait.py").write_text(WAIT)
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(runs),
            "-H", "localhost:1", "--elastic", "--no-probe", str(shared / "wait.py"), str(go)]
    refused = subprocess.run(argv, cwd=shared, capture_output=True, text=True, timeout=120,
                             check=False)
    assert refused.returncode == 3 and "Traceback" not in refused.stderr, refused.stderr
    assert f"{runs} is on its way and group nogroup" in refused.stderr
    assert "fix: chmod g-w" in refused.stderr and "--trust-group nogroup" in refused.stderr
    assert not list(runs.iterdir())  # nothing was started, no run directory left
    proc = subprocess.Popen([*argv[:4], "--trust-group", "nogroup", *argv[4:]], cwd=shared,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with killed_on_failure(proc):
        deadline = time.monotonic() + 120
        while not (shared / "go.started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the rank never started"
            time.sleep(0.1)
        (run_id,) = (p.name for p in runs.iterdir())
        as_nobody(lambda: _swap(runs, run_id, secret, marker))
        time.sleep(3)  # Horovod's driver runs the discovery script every second
        go.write_text("")
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert not marker.exists(), "a planted program ran"
    assert secret.read_text() == "root's own\n"  # no link followed
    mine = runs / f"{run_id}.aside"
    result = json.loads((mine / "result.json").read_text())
    assert result["state"] == "succeeded"
    assert "rank done True" in (mine / "attempt-1" / "rank.0.log").read_text()
    assert "job succeeded" in (mine / "events.log").read_text()
    planted = runs / run_id
    assert all(p.lstat().st_uid == NOBODY for p in planted.rglob("*")), "we wrote in theirs"
    assert (planted / "result.json.tmp").is_symlink() and (planted / "result.json").is_symlink()
