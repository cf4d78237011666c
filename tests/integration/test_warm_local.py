"""Warm spares on one machine (``ringtrain.rank.warm``): a rank started by the entry runs in a
waiting process that has already imported its modules, with the entry's argv, environment,
directory and output, and the entry ends with its status; killing the entry kills the rank; no
warm process means a cold start; another user's socket is never used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ringtrain.rank import envvars, warm

SCRIPT = """\
import os, signal, sys, time
print("PID", os.getpid(), "CWD", os.getcwd(), "ARGV", sys.argv[1:], "TOKEN",
      os.environ.get("SECRET_FOR_TEST"), "JSON", "json" in sys.modules, flush=True)
mode = sys.argv[1]
if mode == "fail":
    sys.exit(3)
if mode == "raise":
    raise RuntimeError("boom")
if mode == "wait":
    signal.signal(signal.SIGTERM, lambda *_: (print("TERM", flush=True), sys.exit(7)))
    print("WAITING", flush=True)
    time.sleep(60)
"""


def _warm(run_id: str, slot: int = 0, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, **{envvars.RUN_ID: run_id})
    proc = subprocess.Popen([sys.executable, "-m", "ringtrain.rank.warm", run_id, "--slot",
                             str(slot), "--imports", "json", "--idle-timeout", "60"],
                            env=env, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "ready" in line, line
    return proc


def _entry(run_id: str, script: Path, mode: str, cwd: Path,
           **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, **{envvars.WARM: run_id, "SECRET_FOR_TEST": "s3cr3t"})
    return subprocess.Popen([sys.executable, "-m", "ringtrain.rank.entry", str(script), mode],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kw)  # type: ignore[call-overload]


def _until_waiting(entry: subprocess.Popen[str]) -> None:
    """Read the rank's output until its script waits (an early end fails, never spins)."""
    assert entry.stdout is not None
    while "WAITING" not in (line := entry.stdout.readline()):
        assert line, f"the rank ended before it waited (exit {entry.wait()})"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize(("mode", "status"), [("ok", 0), ("fail", 3), ("raise", 1)])
def test_the_warm_process_runs_the_rank_and_the_entry_ends_with_its_status(
        script: Path, tmp_path: Path, mode: str, status: int) -> None:
    run_id = f"t{uuid.uuid4().hex[:8]}"
    spare = _warm(run_id)
    work = tmp_path / "work"
    work.mkdir()
    entry = _entry(run_id, script, mode, work)
    out, _ = entry.communicate(timeout=60)
    assert entry.returncode == status, out
    assert f"PID {spare.pid} CWD {work} ARGV ['{mode}'] TOKEN s3cr3t JSON True" in out
    if mode == "raise":
        assert "RuntimeError: boom" in out
    assert spare.wait(timeout=30) == status


def test_with_no_warm_process_the_rank_starts_cold(script: Path, tmp_path: Path) -> None:
    entry = _entry(f"t{uuid.uuid4().hex[:8]}", script, "ok", tmp_path)
    out, _ = entry.communicate(timeout=60)
    assert entry.returncode == 0 and f"PID {entry.pid} " in out


def test_a_warm_process_serves_one_rank_the_next_starts_cold(script: Path, tmp_path: Path) -> None:
    run_id = f"t{uuid.uuid4().hex[:8]}"
    spare = _warm(run_id)
    first = _entry(run_id, script, "wait", tmp_path)
    _until_waiting(first)
    second = _entry(run_id, script, "ok", tmp_path)
    out, _ = second.communicate(timeout=60)
    assert f"PID {second.pid} " in out  # cold: the warm one is busy being the first rank
    first.send_signal(signal.SIGTERM)  # passed on to the rank
    rest, _ = first.communicate(timeout=30)
    assert "TERM" in rest and first.returncode == 7 and spare.wait(timeout=30) == 7


def test_killing_the_entry_kills_the_rank(script: Path, tmp_path: Path) -> None:
    run_id = f"t{uuid.uuid4().hex[:8]}"
    spare = _warm(run_id)
    entry = _entry(run_id, script, "wait", tmp_path)
    _until_waiting(entry)
    entry.kill()
    entry.wait()
    assert spare.wait(timeout=30) == -signal.SIGKILL


def test_an_unused_warm_process_ends_when_its_parent_does(tmp_path: Path) -> None:
    run_id = f"t{uuid.uuid4().hex[:8]}"
    pidfile = tmp_path / "pid"
    shell = subprocess.Popen(
        ["sh", "-c", f'{envvars.RUN_ID}={run_id} "$0" -m ringtrain.rank.warm {run_id} '
         f'--imports json & echo $! > {pidfile}; wait', sys.executable])
    while not pidfile.exists() or not pidfile.read_text().strip():
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    time.sleep(1)
    shell.kill()  # the warm process is orphaned, as when the launcher's session ends
    shell.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    gone = not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text()
    assert gone, "the orphaned warm process is still waiting"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_a_warm_process_of_another_user_is_never_used(script: Path, tmp_path: Path) -> None:
    run_id = f"t{uuid.uuid4().hex[:8]}"
    # nobody's process binds the name this user's entry would look for
    name = warm.address(run_id, 0).decode()[1:]
    squatter = subprocess.Popen(
        ["/usr/bin/python3", "-c", "import socket,sys,time; s=socket.socket(socket.AF_UNIX); "
         "s.bind(b'\\0'+sys.argv[1].encode()); s.listen(); print('up', flush=True); "
         "time.sleep(60)", name], user="nobody", stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "up"
        entry = _entry(run_id, script, "ok", tmp_path)
        out, _ = entry.communicate(timeout=60)
        assert entry.returncode == 0 and f"PID {entry.pid} " in out  # cold, unharmed
    finally:
        squatter.kill()
        squatter.wait()
