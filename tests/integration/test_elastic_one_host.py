"""``--elastic`` on one host (issue 38, item 4): the most common machine, one 8-GPU server.

Horovod's own driver blacklists the host of a failed rank, so on one host a single kill ended
the job. ringtrain's driver rule (ringtrain/hvd_driver.py) keeps a host whose other ranks are
ready and refills the dead rank's slot with a new process: here three local ranks, one killed
with SIGKILL mid-training, and the job ends with exit 0 at its full size, every rank with the
same weights.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from ringtrain.launch.job.driverssh import descendants
from ringtrain.rank import procfs
from tests.integration.procs import Captured, run_result

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
PLAIN = Path(__file__).parent / "user_scripts" / "keras_mnist_style.py"
# The kills land as epoch 3 commits and the refilled slot (and, for the second kill, every
# survivor) joins in the re-form itself, before anyone trains again: 17 epochs left (about
# 7 s) are margin, the rest of a longer run is time no assertion reads.
EPOCHS = "20"


def _ranks(launcher: int) -> list[int]:
    """The rank processes below the launcher: ``python -m ringtrain.rank.entry`` itself, not
    the shell horovodrun runs it with (whose one argument holds the whole line)."""
    return [p for p in descendants(launcher)
            if procfs.argv(p)[1:3] == ["-m", "ringtrain.rank.entry"]]


def _end(job: Captured) -> None:
    """The launcher's whole process group, if the test left it running."""
    if job.proc.poll() is None:
        os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait()


def test_a_rank_killed_on_a_one_host_job_is_refilled_and_the_job_succeeds(
        tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "--elastic", "--min-np", "2", "-H", "localhost:3", str(PLAIN), EPOCHS]
    job = Captured(argv, cwd=tmp_path, start_new_session=True)
    try:
        job.wait_for("checkpoint: committed epoch 3")
        ranks = _ranks(job.proc.pid)
        assert len(ranks) == 3, [procfs.cmdline(p) for p in ranks]
        os.kill(max(ranks), signal.SIGKILL)
        job.proc.wait(timeout=300)
    finally:
        _end(job)
    stdout, stderr = job.join()
    assert job.proc.returncode == 0, stderr[-4000:]
    assert re.search(r"elastic: rank \d on \S+ ended before its script returned .*other ranks "
                     r"live, so the host stays and a new process starts in its slot", stderr), (
        stderr[-3000:])
    # the survivors and the new process: three ranks again, one model
    assert re.search(r"resumed in memory at epoch \d+ step \d+ from rank \d .*; 3 -> 3 ranks",
                     stdout), stdout[-3000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in stdout.splitlines()
               if "RESULT " in line]
    assert len(results) == 3 and len({r["checksum"] for r in results}) == 1, results
    result = run_result(tmp_path)
    assert result["state"] == "succeeded"
    (absorbed,) = result["attempts"][0]["absorbed"]
    assert absorbed["why"].startswith("ended before")


def _listening(pid: int) -> int:
    """The TCP sockets ``pid`` listens on (Gloo's device opens one as hvd.init() begins)."""
    try:
        return sum(c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections(
            kind="tcp"))
    except psutil.Error:
        return -1


def test_a_second_rank_killed_while_the_ring_forms_again_kills_no_survivor(
        tmp_path: Path) -> None:
    """Issue 38 item 3: a fault during the re-form. One rank is killed; as a survivor begins
    ``hvd.init()`` again (its Gloo listener opens), it is killed too. Without ringtrain's
    Horovod patch the others' Gloo set-up threw into nothing, std::terminate in each
    survivor; now their init fails, they reset again, and the job ends with exit 0, one
    model across the ranks it ends with."""
    argv = [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "--elastic", "--min-np", "2", "-H", "localhost:4", str(PLAIN), EPOCHS]
    job = Captured(argv, cwd=tmp_path, start_new_session=True)
    try:
        job.wait_for("checkpoint: committed epoch 3")
        deadline = time.monotonic() + 30
        while len(ranks := sorted(_ranks(job.proc.pid))) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ranks) == 4, [procfs.cmdline(p) for p in ranks]
        first, second = ranks[-1], ranks[1]
        before = _listening(second)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while _listening(second) <= before and time.monotonic() < deadline:
            time.sleep(0.005)  # its reset closed the old ring; a new listener: init began
        os.kill(second, signal.SIGKILL)
        job.proc.wait(timeout=300)
    finally:
        _end(job)
    stdout, stderr = job.join()
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "runs").rglob("*.log"))
    assert "terminate called" not in stderr + logs, (stderr + logs)[-4000:]
    assert job.proc.returncode == 0, stderr[-4000:]
    hit = (stderr + logs).count("a peer was lost while the Gloo contexts formed")
    print(f"survivors whose init failed in the Gloo set-up: {hit}")
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in stdout.splitlines()
               if "RESULT " in line]
    assert len(results) >= 2 and len({r["checksum"] for r in results}) == 1, results
    assert run_result(tmp_path)["state"] == "succeeded"
