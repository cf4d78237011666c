"""ringtrain/hvd_driver.py: its rules (pure), and its rounds in Horovod's own driver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ringtrain.hvd_driver import (
    MAX_SLOT_FAILURES,
    RENDEZVOUS_BACKLOG,
    SLOT_FAILURE_WINDOW_S,
    SPARES_FILE,
    awaited,
    spared,
    spares_ready,
)
from ringtrain.launch.plan.launchers import ELASTIC_SPARES


def test_a_failed_worker_whose_host_has_a_ready_worker_keeps_its_host() -> None:
    failed = {("localhost", 2), ("gpu03", 0)}
    ready = {("localhost", 0), ("localhost", 1), ("gpu02", 0)}
    # localhost lives (two ready workers); gpu03 has none ready: Horovod's rule, blacklisted
    assert spared(failed, ready, {}, 0.0) == [("localhost", 2)]


def test_a_slot_that_keeps_failing_blacklists_its_host_after_the_limit() -> None:
    history: dict[tuple[str, int], list[float]] = {}
    ready = {("localhost", 0)}
    kept = [spared({("localhost", 1)}, ready, history, 10.0 * i)
            for i in range(MAX_SLOT_FAILURES + 1)]
    assert kept == [[("localhost", 1)]] * MAX_SLOT_FAILURES + [[]]
    # another slot of the host has its own count
    assert spared({("localhost", 2)}, ready, history, 40.0) == [("localhost", 2)]


def test_failures_of_a_slot_far_apart_never_add_up_to_the_limit() -> None:
    """A long job on one server whose rank on one GPU is killed every few hours keeps its
    host; the lifetime count it had before blacklisted the only host at the fourth."""
    history: dict[tuple[str, int], list[float]] = {}
    ready = {("localhost", 0)}
    apart = SLOT_FAILURE_WINDOW_S / (MAX_SLOT_FAILURES - 1) + 1
    kept = [spared({("localhost", 1)}, ready, history, apart * i) for i in range(20)]
    assert kept == [[("localhost", 1)]] * 20
    assert len(history[("localhost", 1)]) <= MAX_SLOT_FAILURES


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


# Horovod 0.28.1's own elastic driver, rendezvous server and discovery script runner, with
# workers that do what a rank does there (ready at its hvd.init(), then train until killed):
# b dies, a resets, and ringtrain's list puts the spare c in b's place 0.3 s later
ROUND = '''
import json, os, sys, threading, time
from pathlib import Path

from horovod.runner.elastic import discovery
from horovod.runner.elastic.driver import ElasticDriver
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.http.http_server import RendezvousServer

import ringtrain.hvd_driver as d


def main():
    work, which = Path(sys.argv[1]), sys.argv[2]
    hosts, script = work / "hosts", work / "discover-hosts"
    hosts.write_text("a:1\\nb:1\\n")
    (work / d.SPARES_FILE).write_text(sys.argv[3])
    script.write_text(f"#!/bin/sh\\ncat {hosts}\\n")
    script.chmod(0o700)
    d.patch()
    if which == "ringtrain":
        d.one_round()
    notified = []
    horovods = ElasticDriver._notify_workers_host_changes

    def counted(self, current, res):
        notified.append(sorted(current.host_assignment_order))
        return horovods(self, current, res)

    ElasticDriver._notify_workers_host_changes = counted
    rendezvous = RendezvousServer()
    driver = ElasticDriver(rendezvous, discovery.HostDiscoveryScript(str(script), 1), 1, 2,
                           timeout=30, cooldown_range=(60, 120))
    rendezvous.start(create_rendezvous_handler(driver))
    killed = {name: threading.Event() for name in "abc"}
    started = []

    def worker(slot, events):
        started.append(slot.hostname)
        if len(started) <= 2:
            driver.record_ready(slot.hostname, slot.local_rank)
        killed[slot.hostname].wait(30)
        return (1 if slot.hostname == "b" else 0), time.time()

    driver.start(2, worker)
    time.sleep(0.5)
    killed["b"].set()
    time.sleep(0.1)
    threading.Timer(0.3, lambda: hosts.write_text("a:1\\nc:1\\n")).start()
    began = time.monotonic()
    driver.record_ready("a", 0)  # a's hvd.init() after its reset: back when the round formed
    formed = {"round_s": time.monotonic() - began, "hosts": sorted(driver.host_assignments),
              "started": list(started), "notified_then": len(notified)}
    time.sleep(2.5)  # the discovery thread reads the list meanwhile
    print(json.dumps({**formed, "notified": notified[formed["notified_then"]:]}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
'''


def _round(tmp_path: Path, which: str, spares: str) -> dict[str, object]:
    work = tmp_path / f"{which}-{spares.strip() or 'none'}"
    work.mkdir()
    (work / "round.py").write_text(ROUND)
    out = subprocess.run([sys.executable, str(work / "round.py"), str(work), which, spares],
                         capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_spare_published_as_the_round_forms_joins_that_round_in_horovods_own_driver(
        tmp_path: Path) -> None:
    """Issue 38 item 2, on Horovod 0.28.1's real driver: with ringtrain's one_round the round
    after b's loss waits for ringtrain's list and takes the spare c in, and no "hosts updated"
    follows (it would reset every survivor again). Horovod's own driver forms the round with
    a alone at once, and tells the workers of c after it: a second round."""
    ours = _round(tmp_path, "ringtrain", "1\n")
    started = list(ours["started"])  # type: ignore[call-overload]
    assert ours["hosts"] == ["a", "c"] and sorted(started[:2]) == ["a", "b"], ours
    assert started[2:] == ["c"], ours  # c started in the round that followed b's loss
    assert 0.2 < float(ours["round_s"]) < 1.0 and ours["notified"] == [], ours  # type: ignore[arg-type]
    theirs = _round(tmp_path, "horovod", "1\n")
    assert theirs["hosts"] == ["a"] and float(theirs["round_s"]) < 0.2, theirs  # type: ignore[arg-type]
    assert theirs["notified"] == [["a", "c"]], theirs
    # no warm spare held: the round does not wait for the list (the spare comes after)
    alone = _round(tmp_path, "ringtrain", "0\n")
    assert alone["hosts"] == ["a"] and float(alone["round_s"]) < 0.2, alone  # type: ignore[arg-type]


def test_the_round_waits_only_for_blacklisted_hosts_still_listed() -> None:
    failed = {("b", 0), ("c", 0)}
    assert awaited(failed, lambda h: h == "b", ["a", "b", "c"]) == {"b"}
    assert awaited(failed, lambda h: True, ["a"]) == set()
    assert [spares_ready(t) for t in ("2\n", "", None, "x", "-3")] == [2, 0, 0, 0, 0]
    assert SPARES_FILE == ELASTIC_SPARES
