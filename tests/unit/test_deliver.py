"""deliver(): the secrets file of a job (mpirun, horovodrun) goes to every other host through the
Remote seam, the values on stdin and never in argv; a host that cannot take it stops the
launch, naming the host, and the hosts that took it give it back. (Only hosts that are not
this machine here: this machine's file is written directly, tests/unit/test_secretfile.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ringtrain.errors import LaunchError
from ringtrain.hostfile import Host, allocate, parse_host_spec
from ringtrain.launch.job.deliver import deliver, secretfile_argv
from ringtrain.launch.plan.make import LaunchPlan, PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.rank import envvars, secretfile
from ringtrain.remote import HostResults
from ringtrain.spec import Backend, EnvSpec, LaunchSpec
from tests.fakes import FakeRemote

PY = "/venv/bin/python"
PATH = "~/.ringtrain/secrets/R1-1.json"
STORE = secretfile_argv(PY, "store", PATH)
REMOVE = secretfile_argv(PY, "remove", PATH)


def _plan(*, gloo: bool = True) -> LaunchPlan:
    request = LaunchSpec(script="train.py", host_spec="gpu01:2,gpu02:2",
                         backend=Backend.HOROVODRUN, gloo=gloo, working_dir=Path("/w"),
                         env=(EnvSpec("API_SECRET", "hunter2"),
                              EnvSpec("AWS_SECRET_ACCESS_KEY")))  # named: the rank needs it
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "aws-v"},
                                   False, PY),
                        control_addr="10.0.0.1:5000", control_token="tok-v")
    return make_plan(request, allocate(parse_host_spec("gpu01:2,gpu02:2"), None), inputs)


def test_every_host_gets_the_file_with_the_values_on_stdin() -> None:
    remote = FakeRemote().on("gpu01", STORE).on("gpu02", STORE)
    done = deliver(remote, _plan(), PY)
    assert done is not None and done.path == PATH and not done.local
    assert [h.name for h in done.hosts] == ["gpu01", "gpu02"]
    (data,) = remote.inputs
    assert secretfile.decode(data) == {"API_SECRET": "hunter2", "AWS_SECRET_ACCESS_KEY": "aws-v",
                                       envvars.CONTROL_TOKEN: "tok-v"}
    argvs = " ".join(" ".join(argv) for _, argv, _ in remote.calls)
    assert not [v for v in ("hunter2", "aws-v", "tok-v") if v in argvs]


def test_a_host_that_cannot_take_it_stops_the_launch_and_the_others_give_it_back() -> None:
    remote = (FakeRemote().on("gpu01", STORE).on("gpu01", REMOVE)
              .on("gpu02", STORE, exit_code=1,
                  stderr=f"secretfile: {secretfile.DIR} is a symbolic link; refused\n"))
    with pytest.raises(LaunchError) as info:
        deliver(remote, _plan(), PY)
    assert info.value.message == (
        f"cannot write the secrets file {PATH} on gpu02, so the job was not started: "
        f"gpu02: {secretfile.DIR} is a symbolic link; refused")
    assert "~/.ringtrain/secrets" in info.value.hint
    assert remote.calls[-1][:2] == (("gpu01",), REMOVE)  # taken back where it was written


def test_an_unreachable_host_is_named_with_its_reason() -> None:
    remote = FakeRemote().on("gpu01", STORE).on("gpu01", REMOVE).on(
        "gpu02", STORE, exit_code=None, error="connection refused by 10.0.0.2:22")
    with pytest.raises(LaunchError, match=r"on gpu02, .*gpu02: connection refused by"):
        deliver(remote, _plan(), PY)


class _NoStdin:
    """A Remote without run_with_input (the optional part of the seam)."""

    def run(self, hosts: Sequence[Host], argv: Sequence[str],
            timeout: float) -> HostResults:
        raise AssertionError("nothing to run")

    def run_each(self, commands: Sequence[tuple[Host, Sequence[str]]],
                 timeout: float) -> HostResults:
        raise AssertionError("nothing to run")


def test_a_remote_that_cannot_pass_stdin_is_refused_before_anything_runs() -> None:
    with pytest.raises(LaunchError, match="gpu01: this Remote cannot pass data on stdin"):
        deliver(_NoStdin(), _plan(), PY)


def test_nothing_is_delivered_without_secrets() -> None:
    remote = FakeRemote()
    request = LaunchSpec(script="train.py", host_spec="gpu01:2,gpu02:2", working_dir=Path("/w"))
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/bin"}, False, PY))
    plan = make_plan(request, allocate(parse_host_spec("gpu01:2,gpu02:2"), None), inputs)
    assert deliver(remote, plan, PY) is None  # a dry run's plan: no token, no secret
    assert remote.calls == []
