"""ringtrain/hvd_driver.py's rule (pure): which failed workers leave their host alive."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from ringtrain.hvd_driver import MAX_SLOT_FAILURES, RENDEZVOUS_BACKLOG, spared


def test_a_failed_worker_whose_host_has_a_ready_worker_keeps_its_host() -> None:
    counts: Counter[tuple[str, int]] = Counter()
    failed = {("localhost", 2), ("gpu03", 0)}
    ready = {("localhost", 0), ("localhost", 1), ("gpu02", 0)}
    # localhost lives (two ready workers); gpu03 has none ready: Horovod's rule, blacklisted
    assert spared(failed, ready, counts) == [("localhost", 2)]


def test_a_slot_that_keeps_failing_blacklists_its_host_after_the_limit() -> None:
    counts: Counter[tuple[str, int]] = Counter()
    ready = {("localhost", 0)}
    kept = [spared({("localhost", 1)}, ready, counts) for _ in range(MAX_SLOT_FAILURES + 1)]
    assert kept == [[("localhost", 1)]] * MAX_SLOT_FAILURES + [[]]


def test_it_is_horovodrun_its_parser_and_its_answers() -> None:
    """The same command line as horovodrun (Horovod's own parser): the same --version, and
    the same refusal of a flag horovodrun does not know."""
    horovodrun = str(Path(sys.executable).parent / "horovodrun")
    ours = [sys.executable, "-I", "-m", "ringtrain.hvd_driver"]
    for args in (["--version"], ["--no-such-flag", "-np", "2", "true"]):
        theirs = subprocess.run([horovodrun, *args], capture_output=True, text=True,
                                timeout=60, check=False)
        mine = subprocess.run([*ours, *args], capture_output=True, text=True, timeout=60,
                              check=False)
        assert (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout), args
        assert mine.stderr.replace("hvd_driver.py", "horovodrun") == theirs.stderr, args


def test_the_rendezvous_server_takes_the_kernels_backlog_and_daemon_threads() -> None:
    """Horovod's rendezvous server takes socketserver's backlog of 5 (a re-form's burst of
    connections waits for SYN retransmits) and non-daemon threads (swept on every request);
    tune_rendezvous changes both, here in a fresh process."""
    code = ("from horovod.runner.http.http_server import RendezvousHTTPServer as S\n"
            "import ringtrain.hvd_driver as d\n"
            "before = (S.request_queue_size, S.daemon_threads)\n"
            "d.tune_rendezvous()\n"
            "print(*before, S.request_queue_size, S.daemon_threads)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["5", "False", str(RENDEZVOUS_BACKLOG), "True"]
