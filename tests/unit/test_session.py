"""Session placement across restarts: -np on the first attempt, --min-np after a host is lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ringtrain.errors import AllocationError
from ringtrain.hostfile import Inventory, parse_host_spec
from ringtrain.launch.result import JobResult, JobState
from ringtrain.launch.session import Hooks, Preflight, RestartPolicy, Session, SessionEnv
from ringtrain.launch.supervise import SupervisionPolicy
from ringtrain.request import LaunchRequest
from tests.fakes import FakeRemote


def _session(np: int | None, restart: RestartPolicy, asked: list[int | None]) -> Session:
    inventory = parse_host_spec("gpu01:2,gpu02:2")

    def preflight(inv: Inventory, need: int | None) -> Preflight:
        asked.append(need)
        return Preflight(inv)

    return Session(
        LaunchRequest(script="train.py", np=np, runs_dir=Path("/nonexistent")),
        inventory,
        FakeRemote(),  # placement never calls a host
        SessionEnv("r1", {}, is_root=False, python="python3"),
        SupervisionPolicy(),
        restart,
        Hooks(preflight=preflight),
    )


def _lose_gpu02(session: Session) -> None:
    session.results.append(JobResult(JobState.FAILED, 1, Path("/r"), 1.0))
    session._cooldown["gpu02"] = time.monotonic() + 600


def test_restart_shrinks_to_min_np_and_preflight_is_asked_for_the_floor() -> None:
    asked: list[int | None] = []
    session = _session(4, RestartPolicy(max_restarts=1, min_np=2), asked)
    first, _ = session._allocation()
    assert first.np == 4
    _lose_gpu02(session)
    second, _ = session._allocation()
    assert second.np == 2 and [h.name for h in second.hosts] == ["gpu01"]
    assert asked == [4, 2]


def test_restart_without_min_np_needs_the_first_attempts_size() -> None:
    for np in (4, None):  # -np 4, or every slot (4)
        asked: list[int | None] = []
        session = _session(np, RestartPolicy(max_restarts=1), asked)
        assert session._allocation()[0].np == 4
        _lose_gpu02(session)
        with pytest.raises(AllocationError) as info:
            session._allocation()
        assert "only 2 slots left after excluding gpu02; the restart needs 4" in info.value.message
        assert "--min-np" in info.value.hint
        assert asked == [np, 4]
