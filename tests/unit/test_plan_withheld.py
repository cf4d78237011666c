"""The launching shell's CUDA_VISIBLE_DEVICES and ringtrain's own launcher settings reach no
rank unless ``--env`` names them: not by ``-x``, not by the launcher command's environment
(which the ranks on the launcher's host inherit), not by horovodrun's or srun's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.rank import envvars
from ringtrain.spec import Backend, EnvSpec, LaunchSpec

SHELL = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ada",
    "CUDA_VISIBLE_DEVICES": "0",
    "RINGTRAIN_HOSTS": "gpu.txt",
    "RINGTRAIN_PYTHON": "/opt/py/bin/python",
    "RINGTRAIN_CHECKPOINT": "s3://b/ck",
    "RINGTRAIN_SIM_HOST": "node1",  # the simulated cluster's sshd sets it for all on a host
    "NCCL_DEBUG": "INFO",
}


def _plan(backend: Backend, env: tuple[EnvSpec, ...] = (), *, gloo: bool = False):  # type: ignore[no-untyped-def]
    spec = LaunchSpec(script="train.py", host_spec="localhost:2", working_dir=Path("/w"),
                      runs_dir=Path("/w/runs"), backend=backend, env=env, gloo=gloo)
    alloc = allocate(parse_host_spec("localhost:2"), spec.np)
    inputs = PlanInputs(SessionEnv("R1", SHELL, False, "/venv/bin/python"),
                        control_addr="10.0.0.1:5000", control_token="t0ken")
    return make_plan(spec, alloc, inputs)


def _x_names(argv: tuple[str, ...]) -> set[str]:
    return {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}


@pytest.mark.parametrize("backend", [Backend.MPIRUN, Backend.HOROVODRUN, Backend.SRUN])
def test_the_shells_gpu_list_and_launcher_settings_reach_no_rank(backend: Backend) -> None:
    plan = _plan(backend)
    kept = {"CUDA_VISIBLE_DEVICES", "RINGTRAIN_HOSTS", "RINGTRAIN_PYTHON", "RINGTRAIN_CHECKPOINT"}
    assert set(plan.command.withheld) == kept
    env = plan.started.environment(SHELL)  # what the launcher command (and its local ranks) get
    assert not kept & set(env)
    assert env["RINGTRAIN_SIM_HOST"] == "node1"  # a host's own, not the launcher's setting
    assert env[envvars.RUN_ID] == "R1"  # ringtrain's own for this run still go
    assert env["NCCL_DEBUG"] == "INFO"
    assert not kept & set(plan.forwarded)
    assert not kept & _x_names(plan.command.argv)
    assert {envvars.RUN_ID, envvars.CONTROL_ADDR, "NCCL_DEBUG"} <= set(plan.forwarded)
    # said where a user looks, and a by-hand run leaves them out as well
    assert "kept from the ranks" in plan.describe()
    assert plan.by_hand_argv.startswith("env -u CUDA_VISIBLE_DEVICES -u RINGTRAIN_CHECKPOINT")
    assert plan.to_json()["withheld"] == sorted(kept)


def test_env_asks_for_the_gpu_list_by_name_or_with_a_value() -> None:
    plan = _plan(Backend.MPIRUN, (EnvSpec("CUDA_VISIBLE_DEVICES", plain=True),))
    assert "CUDA_VISIBLE_DEVICES" in _x_names(plan.command.argv)
    assert "CUDA_VISIBLE_DEVICES" not in plan.command.withheld
    assert plan.started.environment(SHELL)["CUDA_VISIBLE_DEVICES"] == "0"
    given = _plan(Backend.HOROVODRUN, (EnvSpec("CUDA_VISIBLE_DEVICES", "2,3"),))
    assert given.started.environment(SHELL)["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_a_shell_without_them_changes_nothing() -> None:
    spec = LaunchSpec(script="train.py", host_spec="localhost:2", working_dir=Path("/w"),
                      runs_dir=Path("/w/runs"))
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/bin"}, False, "/p"))
    plan = make_plan(spec, allocate(parse_host_spec("localhost:2"), 2), inputs)
    assert plan.command.withheld == ()
    assert "kept from the ranks" not in plan.describe()
    assert "withheld" not in plan.to_json()
    assert not plan.by_hand_argv.startswith("env -u")
