"""Per-host hubs (rank/hub.py, issue 41) with real rank processes on this machine: the ranks'
own agent (rank/agent.py) checks in with the hub the first of them starts, the hub with the
real control server, and supervision sees every rank as it would on its own connection: a
rank stopped with SIGSTOP is named as that rank, a killed one is gone at once, the launcher's
``stop`` reaches every rank, and a hub that dies leaves ranks that end themselves."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ringtrain.hostfile import Host, Inventory, allocate
from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.record.result import FailureKind
from ringtrain.launch.supervise.detect import check
from ringtrain.rank import envvars, procfs
from ringtrain.spec import SupervisionPolicy

RANKS = 3
RANK_PROGRAM = (
    "from ringtrain.rank import agent\n"
    "assert agent.start_from_env() is not None\n"
    "import time\n"
    "while True: time.sleep(1)\n"
)


def _wait(condition: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _hubs(run_id: str) -> list[int]:
    """This run's hub processes on this machine (by their environment, as the reaper finds
    a job's processes)."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        if "ringtrain.rank.hub" not in procfs.cmdline(pid):
            continue
        if f"{envvars.RUN_ID}={run_id}".encode() in procfs.read(f"/proc/{pid}/environ"):
            found.append(pid)
    return found


class Job:
    def __init__(self, tmp_path: Path, launcher_timeout: float = 30.0) -> None:
        self.server = ControlServer("127.0.0.1", ranks=RANKS, per_host=RANKS)
        self.run_id = f"hubtest-{secrets.token_hex(4)}"
        env = {**os.environ, envvars.CONTROL_ADDR: self.server.address,
               envvars.CONTROL_TOKEN: self.server.token, envvars.RUN_ID: self.run_id,
               envvars.CONTROL_HUB: "1", envvars.LAUNCHER_TIMEOUT: f"{launcher_timeout:g}"}
        self.procs = [
            subprocess.Popen([sys.executable, "-c", RANK_PROGRAM],
                             env={**env, "OMPI_COMM_WORLD_RANK": str(r)},
                             stderr=(tmp_path / f"rank{r}.err").open("wb"))
            for r in range(RANKS)]
        self.alloc = allocate(Inventory((Host(socket.gethostname(), RANKS),)), RANKS)

    def connected(self) -> list[int]:
        return [r.rank for r in self.server.snapshot().ranks if r.connected]

    def end(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()
        for pid in _hubs(self.run_id):
            os.kill(pid, signal.SIGKILL)
        self.server.close()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    one = Job(tmp_path)
    yield one
    one.end()


def test_ranks_check_in_through_one_hub_and_a_stopped_rank_is_named_as_that_rank(
        job: Job) -> None:
    assert _wait(lambda: job.connected() == list(range(RANKS)), 20), job.server.snapshot()
    # one hub: started by the first rank to find none (one that lost the race to it ended)
    assert _wait(lambda: len(_hubs(job.run_id)) == 1, 5), _hubs(job.run_id)
    states = job.server.snapshot().ranks
    assert [s.pid for s in states] == [p.pid for p in job.procs]  # each rank's own identity

    policy = SupervisionPolicy(heartbeat_timeout=3.0)
    t0 = time.monotonic()
    time.sleep(2.5)  # the hub's beats keep every rank fresh past a beat or two
    assert check(job.server.snapshot(), job.alloc, policy, t0) is None
    job.procs[1].send_signal(signal.SIGSTOP)
    faults = []
    assert _wait(lambda: faults.append(check(job.server.snapshot(), job.alloc, policy, t0))
                 or faults[-1] is not None, 15)
    fault = faults[-1]
    assert fault is not None and fault.kind is FailureKind.RANK_SILENT, fault
    assert fault.ranks == (1,)
    job.procs[1].send_signal(signal.SIGCONT)


def test_a_killed_rank_is_gone_at_once_and_stop_reaches_every_other_rank(job: Job) -> None:
    assert _wait(lambda: job.connected() == list(range(RANKS)), 20)
    job.procs[2].kill()
    killed = time.monotonic()
    assert _wait(lambda: job.connected() == [0, 1], 5)
    assert time.monotonic() - killed < 2.0  # the hub's "left", not a heartbeat timeout
    job.server.broadcast("stop")
    assert _wait(lambda: all(p.poll() is not None for p in job.procs[:2]), 10)
    assert [p.returncode for p in job.procs[:2]] == [-signal.SIGKILL] * 2  # the agent's _die


def test_a_hub_that_dies_loses_its_ranks_and_they_end_themselves(tmp_path: Path) -> None:
    job = Job(tmp_path, launcher_timeout=3.0)
    try:
        assert _wait(lambda: job.connected() == list(range(RANKS)), 20)
        assert _wait(lambda: len(_hubs(job.run_id)) == 1, 5)  # a loser of the race ended
        (hub,) = _hubs(job.run_id)
        os.kill(hub, signal.SIGKILL)
        assert _wait(lambda: job.connected() == [], 5)  # the launcher: the host's ranks gone
        # the ranks: their launcher gone (the dead-man switch, 3 s here)
        assert _wait(lambda: all(p.poll() is not None for p in job.procs), 15)
        errs = (tmp_path / "rank0.err").read_text()
        assert "no word from the launcher" in errs, errs
    finally:
        job.end()
