"""The re-check before a restart (issue 24, item 5): the failed attempt's hosts must free their
GPUs, or sit out; a host whose processes outlived the teardown sits out too.

The hosts answer through the Remote seam (tests/fakes.py) with nvidia-smi rows in the real
format; the clock and the sleep are injected, so the waiting is exact and takes no time."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringtrain.hostfile import parse_host_spec
from ringtrain.launch.record.gpurecheck import Recheck
from ringtrain.launch.record.result import HostTeardown, JobResult, JobState
from ringtrain.launch.recover.hostrest import HostRest
from ringtrain.launch.recover.outcome import decide
from ringtrain.launch.recover.recheck import NVIDIA_SMI_ARGV, judge, recheck
from ringtrain.spec import RestartPolicy
from tests.fakes import FakeRemote

UUID = "GPU-4f6c7a21-93b2-11ee-8c90-0242ac120002"


def _rows(*used_mib: int) -> str:
    return "".join(f"{i}, NVIDIA H100 80GB HBM3, {UUID[:-1]}{i}, 81559, {mib}, 0, 535.104.05\n"
                   for i, mib in enumerate(used_mib))


class Clock:
    """A clock that moves only when the loop sleeps; ``at`` runs actions at given times."""

    def __init__(self, actions: dict[float, object]) -> None:
        self.now = 0.0
        self.actions = dict(actions)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for at in sorted(self.actions):
            if at <= self.now:
                self.actions.pop(at)()  # type: ignore[operator]


def test_judge_waits_then_leaves_out_what_stays_busy() -> None:
    busy = {"gpu01": (), "gpu02": ("GPU 1 busy (40000 MiB used, 0% utilization)",)}
    assert judge(busy, 3.0, 15.0) == judge(busy, 0.0, 15.0)
    early = judge(busy, 3.0, 15.0)
    assert early.freed == ("gpu01",) and early.waiting == ("gpu02",) and not early.left_out
    late = judge(busy, 15.2, 15.0)
    assert late.freed == ("gpu01",) and not late.waiting
    assert late.left_out == (("gpu02", "GPU 1 busy (40000 MiB used, 0% utilization) 15 s "
                                       "after the teardown"),)


def test_a_host_that_frees_its_gpus_is_waited_for_and_kept() -> None:
    hosts = parse_host_spec("gpu01:2,gpu02:2").hosts
    remote = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(0, 3))
    remote.on("gpu02", NVIDIA_SMI_ARGV, stdout=_rows(31000, 2))  # a dead rank's context
    clock = Clock({2.0: lambda: remote.on("gpu02", NVIDIA_SMI_ARGV, stdout=_rows(0, 2))})
    notes: list[str] = []
    found = recheck(remote, hosts, 15.0, notes.append, clock=clock, sleep=clock.sleep)
    # looks after 0.1, 0.2, 0.4, 0.6 s, then every 0.5 s: the one at 2.1 s finds it freed
    assert [h for h, _ in found.waited] == ["gpu02"] and not found.left_out and found.hosts == 2
    assert found.waited[0][1] == pytest.approx(2.1)
    assert notes[0] == ("re-check: waiting up to 15 s for the GPUs of gpu02 to be freed "
                        "(gpu02: GPU 0 busy (31000 MiB used, 0% utilization))")
    assert notes[-1] == "re-check: gpu02 freed its GPUs after 2.1 s"
    asked = [hosts for hosts, _, _ in remote.calls]
    assert asked[0] == ("gpu01", "gpu02") and set(asked[1:]) == {("gpu02",)}  # only the busy


def test_a_host_still_busy_at_the_timeout_sits_out_the_cooldown() -> None:
    hosts = parse_host_spec("gpu01:1,gpu02:1").hosts
    remote = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(0))
    remote.on("gpu02", NVIDIA_SMI_ARGV, stdout=_rows(31000))
    clock = Clock({})
    notes: list[str] = []
    found = recheck(remote, hosts, 3.0, notes.append, clock=clock, sleep=clock.sleep)
    assert not found.waited and [h for h, _ in found.left_out] == ["gpu02"]
    assert "gpu02 left out for a cooldown: GPU 0 busy (31000 MiB used" in notes[-1]
    rest = HostRest().excluding(("gpu02",), 100.0, 600.0)
    assert rest.resting(101.0) == {"gpu02"} and rest.resting(701.0) == frozenset()
    back = Recheck.from_json(found.to_json())
    assert back is not None and back.to_json() == found.to_json()


def test_free_gpus_unanswered_hosts_and_gpus_beyond_the_slots_do_not_wait() -> None:
    """A host that cannot be asked is said and left to the next pre-flight; one with no
    nvidia-smi is a CPU host; a busy GPU that no rank of the host uses (beyond its slots) is
    not the dead rank's."""
    hosts = parse_host_spec("gpu01:1,gpu02:1,gpu03:1").hosts
    remote = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(0, 50000))
    remote.on("gpu02", NVIDIA_SMI_ARGV, exit_code=None, error="ssh: connect timed out")
    remote.on("gpu03", NVIDIA_SMI_ARGV, stdout="", stderr="sh: nvidia-smi: not found",
              exit_code=127)
    clock = Clock({})
    notes: list[str] = []
    found = recheck(remote, hosts, 15.0, notes.append, clock=clock, sleep=clock.sleep)
    assert not found.waited and not found.left_out and len(remote.calls) == 1
    assert found.unknown == (("gpu02", "ssh: connect timed out"),)
    assert notes == ["re-check: could not ask gpu02 (ssh: connect timed out): the pre-flight "
                     "judges it"]
    quiet = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(0))
    calm = recheck(quiet, hosts[:1], 15.0, notes.append, clock=clock, sleep=clock.sleep)
    assert calm.describe().startswith("1 host(s) re-checked, GPUs free") and len(notes) == 1


def test_a_stop_during_the_wait_ends_it() -> None:
    hosts = parse_host_spec("gpu01:1").hosts
    remote = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(31000))
    clock = Clock({})
    asked: list[str] = []
    found = recheck(remote, hosts, 60.0, asked.append, clock=clock, sleep=clock.sleep,
                    stopped=lambda: clock.now >= 2.0)
    assert clock.now == pytest.approx(2.1) and not found.left_out and not found.waited


def test_a_host_whose_processes_outlived_the_teardown_is_left_out() -> None:
    teardown = (HostTeardown("gpu01", 2), HostTeardown("gpu02", 2, left=("4242 python",)),
                HostTeardown("gpu03", 0, error="ssh: connection refused"),
                HostTeardown("(launcher)", 0, left=("77 ssh",)))
    result = JobResult(JobState.FAILED, 1, Path("/r"), 1.0, teardown=teardown)
    decision = decide(result, 1, RestartPolicy(max_restarts=2))
    assert decision.restart and decision.exclude == ("gpu02",)
    assert "without gpu02 (processes outlived the teardown) for a cooldown" in decision.reason
    # one the reaper could not ask (an ssh hiccup) is only avoided while the others suffice
    assert decision.suspect == ("gpu03",) and "avoiding gpu03" in decision.reason
    clean = JobResult(JobState.FAILED, 1, Path("/r"), 1.0, teardown=teardown[:1])
    assert decide(clean, 1, RestartPolicy(max_restarts=2)).exclude == ()


def test_the_first_looks_come_quickly_then_every_half_second() -> None:
    """A killed rank's memory is freed within a quarter second on a real GPU: the first
    look after the one that found it busy comes 0.1 s later, not 0.5 s."""
    hosts = parse_host_spec("gpu01:1").hosts
    remote = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(31000))
    clock = Clock({0.1: lambda: remote.on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(0))})
    found = recheck(remote, hosts, 15.0, lambda _: None, clock=clock, sleep=clock.sleep)
    assert found.waited == (("gpu01", 0.1),) and len(remote.calls) == 2
    pauses: list[float] = []
    stuck = FakeRemote().on("gpu01", NVIDIA_SMI_ARGV, stdout=_rows(31000))
    recheck(stuck, hosts, 3.0, lambda _: None, clock=clock, sleep=pauses.append,
            stopped=lambda: len(pauses) >= 7)
    assert pauses == [0.1, 0.1, 0.2, 0.2, 0.5, 0.5, 0.5]
