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


def test_horovods_own_cooldown_brings_a_host_back_within_ringtrains_range() -> None:
    """Issue 38 item 6 ("the driver stops using a host after 3 failures whatever the cooldown
    says"), checked against Horovod 0.28.1's own HostState: there is no such count. With a
    range (ringtrain always passes --blacklist-cooldown-range, 60 240 by default) each
    blacklisting doubles the cooldown, capped at the range's top, and the host comes back
    after it, the tenth time as the first. Without one (horovodrun's default) a blacklisted
    host never comes back: why ringtrain never leaves it out."""
    from unittest import mock

    from horovod.runner.elastic import discovery

    from ringtrain.spec import ElasticPolicy

    low, high = ElasticPolicy().cooldown_range
    now = [1000.0]
    with mock.patch.object(discovery.time, "time", lambda: now[0]):
        host = discovery.HostState((low, high))
        for _ in range(10):
            host.blacklist()
            assert host.is_blacklisted() and not host.is_resurrected()
            now[0] += low - 1
            assert not host.is_resurrected()
            now[0] += high - low + 2
            assert host.is_resurrected()
            host.whitelist()
        forever = discovery.HostState()
        forever.blacklist()
        now[0] += 10 * 3600
        assert forever.is_blacklisted() and not forever.is_resurrected()
