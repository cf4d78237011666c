"""launch/job/driverssh.py on real processes: below a root, the ssh clients that reach the lost
host end; one to another host, or naming the host only inside a longer argument, stays."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ringtrain.launch.job import driverssh
from ringtrain.rank import procfs


def _fake_ssh(tmp_path: Path) -> Path:
    """A program whose process is named ``ssh`` (a script's name is its process's name)."""
    ssh = tmp_path / "ssh"
    ssh.write_text("#!/bin/sh\nsleep 60\n")
    ssh.chmod(0o700)
    return ssh


def _ssh_below(root: int) -> dict[str, int]:
    """The live fake ssh clients below ``root`` by destination (a zombie has no argv)."""
    found = {}
    for pid in driverssh.descendants(root):
        argv = procfs.argv(pid)
        if procfs.comm(pid) == "ssh" and len(argv) > 2 and not procfs.is_zombie(pid):
            found[argv[2]] = pid
    return found


def test_only_the_ssh_clients_that_reach_the_lost_host_end(tmp_path: Path) -> None:
    ssh = _fake_ssh(tmp_path)
    line = " & ".join(f"{ssh} {dest} 'python -m ringtrain.rank.entry x'"
                      for dest in ("gpu03", "gpu02", "gpu03x"))
    # horovodrun -> its middleman shell -> ssh, as safe_shell_exec runs them
    root = subprocess.Popen(["sh", "-c", f"{line} & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_ssh_below(root.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = _ssh_below(root.pid)
        assert set(before) == {"gpu03", "gpu02", "gpu03x"}
        assert driverssh.cut(root.pid, "gpu03") == 1
        deadline = time.monotonic() + 10
        while "gpu03" in _ssh_below(root.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        after = _ssh_below(root.pid)
        assert set(after) == {"gpu02", "gpu03x"}
        assert after == {k: v for k, v in before.items() if k != "gpu03"}
        assert driverssh.cut(root.pid, "gpu09") == 0
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
