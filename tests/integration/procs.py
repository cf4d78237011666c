"""Process helpers for tests that watch ``ringtrain launch`` from outside (psutil).

Children come and go while a launcher starts (mpirun, its helpers, short-lived probes), so a
child can vanish between listing it and reading its command line; these helpers skip such
children instead of failing the test on the race.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from ringtrain.bench.allreduce.harness import parse_results


def descendants(pid: int, needle: str) -> list[psutil.Process]:
    """Living descendants of ``pid`` whose command line contains ``needle``."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for kid in kids:
        try:
            if kid.is_running() and needle in " ".join(kid.cmdline()):
                found.append(kid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return found


def wait_for_descendants(pid: int, needle: str, count: int, timeout: float = 60
                         ) -> list[psutil.Process]:
    """Wait until ``count`` descendants of ``pid`` run ``needle``; fail the test after
    ``timeout`` seconds (a start that slow means something hangs, not a slow machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = descendants(pid, needle)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    pytest.fail(f"{count} processes running {needle!r} did not start in {timeout:g} s")


def describe(procs: list[psutil.Process]) -> list[str]:
    """PID and command line of each process, for a failure message (gone ones say so)."""
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid}: {' '.join(p.cmdline())}")
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            out.append(f"{p.pid}: (gone)")
    return out


def results_by_rank(output: str) -> dict[int, dict[str, Any]]:
    """The ``RESULT {json}`` lines ranks print (ringtrain.bench.allreduce.harness.parse_results),
    by rank."""
    return {int(r["rank"]): r for r in parse_results(output)}


def read_until(proc: subprocess.Popen[str], text: str, timeout: float = 120,
               why: str = "training did not start") -> None:
    """Read the job's stdout until a line has ``text`` (else kill it and fail with ``why``);
    keep draining it in the background."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if text in line:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(why)
    threading.Thread(target=proc.stdout.read, daemon=True).start()


def run_result(tmp_path: Path) -> dict[str, Any]:
    """result.json of the one run under ``tmp_path/runs``."""
    (run_dir,) = (tmp_path / "runs").iterdir()
    return json.loads((run_dir / "result.json").read_text())  # type: ignore[no-any-return]


@contextmanager
def killed_on_failure(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> Iterator[None]:
    """Inside: waiting for a launcher started by hand. A failure there (pytest.fail included)
    SIGKILLs it, so a failed test leaves nothing running; its ranks' dead-man switch ends them."""
    try:
        yield
    except BaseException:
        proc.kill()
        raise


class Captured:
    """A launcher started by a test, its stdout and stderr read into lists as they come (a
    thread each), so the test can wait for a line while it runs."""

    def __init__(self, argv: Sequence[str], **popen: Any) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, **popen)
        self.out: list[str] = []
        self.err: list[str] = []
        streams = ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        self._readers = [threading.Thread(target=sink.extend, args=(stream,), daemon=True)
                         for stream, sink in streams]
        for reader in self._readers:
            reader.start()

    def wait_for(self, text: str, timeout: float = 240, times: int = 1) -> None:
        """Until ``times`` stdout lines hold ``text``; the test fails if the launcher ends
        first."""
        deadline = time.monotonic() + timeout
        while sum(text in line for line in self.out) < times:
            assert self.proc.poll() is None, "".join(self.err)[-3000:]
            assert time.monotonic() < deadline, "".join(self.out + self.err)[-3000:]
            time.sleep(0.2)

    def join(self) -> tuple[str, str]:
        """After the launcher ended: everything it printed, (stdout, stderr)."""
        for reader in self._readers:
            reader.join(timeout=10)
        return "".join(self.out), "".join(self.err)
