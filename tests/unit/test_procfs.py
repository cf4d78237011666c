"""ringtrain.rank.procfs against the real /proc of this test process and a child it starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from ringtrain.rank import procfs


def test_own_process() -> None:
    me = os.getpid()
    assert procfs.parent(me) == os.getppid()
    assert procfs.state(me) in ("R", "S")
    assert procfs.comm(me).startswith("python") or procfs.comm(me).startswith("pytest")
    assert "pytest" in procfs.cmdline(me) or "python" in procfs.cmdline(me)
    start = procfs.start_time(me)
    ticks = os.sysconf("SC_CLK_TCK")
    boot = psutil.boot_time()
    assert start is not None and abs(boot + start / ticks - psutil.Process(me).create_time()) < 2


def test_child_environment_and_zombie() -> None:
    env = dict(os.environ, RT_PROCFS_TEST="yes (with) parens")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.monotonic() + 10
        while "time.sleep" not in procfs.cmdline(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd (before, /proc shows our environment)
        assert child.pid in procfs.children(os.getpid())
        assert procfs.environ_has(child.pid, b"RT_PROCFS_TEST=yes (with) parens")
        assert not procfs.environ_has(child.pid, b"RT_PROCFS_TEST=yes")
        assert procfs.uts_namespace(child.pid) == procfs.uts_namespace("self")
        child.kill()
        deadline = time.monotonic() + 5
        while not procfs.is_zombie(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert procfs.is_zombie(child.pid)  # killed but not yet reaped
    finally:
        child.kill()
        child.wait()
    assert procfs.stat_fields(child.pid) == [] and procfs.start_time(child.pid) is None


def test_started_at_is_the_process_start_on_the_wall_clock() -> None:
    """What a rank's init_begin says of itself (the launcher tells a process of a doomed
    round from the lost rank's replacement by it): a child started now reads as now, to the
    clock tick; this process started before it; a gone process reads None."""
    before = time.time()
    child = subprocess.Popen(["sleep", "5"])
    try:
        started = procfs.started_at(child.pid)
        # btime is whole seconds, and the wall clock drifts from the boot clock (measured here:
        # 1.003 s early on a machine up for days), so 2 s either way
        assert started is not None and before - 2.0 <= started <= time.time() + 2.0
        mine = procfs.started_at()
        assert mine is not None and mine <= started
    finally:
        child.kill()
        child.wait()
    assert procfs.started_at(child.pid) is None
