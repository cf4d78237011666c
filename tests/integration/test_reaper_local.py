"""The reaper on this machine, against real process trees: which reported PIDs it may end.

A rank reports its Open MPI daemon (PID and start time) to the launcher, and the teardown passes
those to the reaper. A reported PID is ended only when its start time matches, it is named like
Open MPI's daemon and it is the parent of a process with the job's RINGTRAIN_RUN_ID, so a rank
that reports another process (init, sshd, another job's daemon) cannot have it killed. The
"daemon" here is a Python process that names itself ``orted`` (prctl), the name Open MPI's has.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from ringtrain.rank import envvars, procfs, reaper

# A parent that names itself (prctl PR_SET_NAME) and starts one child with the given environment
PARENT = r"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
env = dict(os.environ)
if sys.argv[2]:
    env["RINGTRAIN_RUN_ID"] = sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
print(child.pid, flush=True)
time.sleep(120)
"""


class Tree:
    def __init__(self, name: str, run_id: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != envvars.RUN_ID}
        self.parent = subprocess.Popen([sys.executable, "-c", PARENT, name, run_id], env=env,
                                       stdout=subprocess.PIPE, text=True)
        assert self.parent.stdout is not None
        self.child = int(self.parent.stdout.readline())
        deadline = time.monotonic() + 10
        while procfs.comm(self.parent.pid) != name[:15] and time.monotonic() < deadline:
            time.sleep(0.02)
        self.start = procfs.start_time(self.parent.pid)
        assert self.start is not None

    def alive(self) -> tuple[bool, bool]:
        return (self.parent.poll() is None,
                procfs.start_time(self.child) is not None and not procfs.is_zombie(self.child))

    def end(self) -> None:
        for pid in (self.child, self.parent.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        self.parent.wait(timeout=10)


@pytest.fixture
def trees() -> Iterator[list[Tree]]:
    made: list[Tree] = []
    yield made
    for t in made:
        t.end()


def _run() -> str:
    return f"reaptest-{uuid.uuid4().hex[:8]}"


def test_a_reported_daemon_that_parents_a_rank_is_ended_through_pidfds(
        trees: list[Tree]) -> None:
    run = _run()
    t = Tree("orted", run)
    trees.append(t)
    found = reaper.find(run, {t.parent.pid: t.start})
    try:
        assert sorted(p.pid for p in found) == sorted([t.child, t.parent.pid])
        assert all(p.fd is not None for p in found)  # this kernel has pidfds (Linux >= 5.3)
    finally:
        reaper.close(found)
    result = reaper.reap(run, {t.parent.pid: t.start}, kill=True)
    assert result["left"] == [] and len(result["found"]) == 2
    t.parent.wait(timeout=10)
    assert t.alive() == (False, False)


@pytest.mark.parametrize("case", ["not-a-parent", "other-name", "wrong-start", "init"])
def test_a_reported_pid_that_is_not_the_jobs_daemon_is_left_alone(
        trees: list[Tree], case: str) -> None:
    run = _run()
    if case == "not-a-parent":  # an orted whose child is not this job's (another job's daemon)
        t = Tree("orted", _run())
        trees.append(t)
        trees.append(Tree("orted", run))  # this job's, so the job has ranks on the host
        pids = {t.parent.pid: t.start}
    elif case == "other-name":  # the rank's parent, but not a daemon (sshd, a shell, a tool)
        t = Tree("sshd", run)
        trees.append(t)
        pids = {t.parent.pid: t.start}
    elif case == "wrong-start":  # the daemon's PID, since recycled
        t = Tree("orted", run)
        trees.append(t)
        pids = {t.parent.pid: t.start + 1}
    else:
        t = Tree("orted", run)
        trees.append(t)
        pids = {1: procfs.start_time(1) or 0, t.parent.pid: t.start + 1}
    result = reaper.reap(run, pids, kill=True)
    assert t.parent.pid not in [pid for pid, _ in result["found"]]
    assert 1 not in [pid for pid, _ in result["found"]]
    time.sleep(0.2)
    assert t.parent.poll() is None  # the reported process lives on
    if case != "not-a-parent":
        assert t.alive()[1] is False  # the marked child, the job's, was ended


def test_without_reported_pids_only_the_marked_processes_are_ended(trees: list[Tree]) -> None:
    run = _run()
    t = Tree("orted", run)
    trees.append(t)
    result = reaper.reap(run, {}, kill=True)  # no reported PIDs: the marked child alone
    assert [pid for pid, _ in result["found"]] == [t.child] and result["left"] == []
    assert t.parent.poll() is None
