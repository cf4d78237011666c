"""--strategy tf-multiworker: the cluster from the allocation (every rank a worker task, listed
once, ports distinct on each host), the plan's dry run, each rank's TF_CONFIG and the errors a
user can meet (horovodrun, a TF_CONFIG of their own, a port in use)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch import tfcluster
from ringtrain.launch.plan import PlanInputs, make_plan
from ringtrain.rank import envvars, tfconfig
from ringtrain.spec import Backend, LaunchSpec, Strategy
from tests.golden import assert_golden

HOSTS = "gpu01:2,gpu02:3"


def _spec(**kw: object) -> LaunchSpec:
    return LaunchSpec(script="train.py", host_spec=HOSTS, working_dir=Path("/work/job"),
                      runs_dir=Path("/work/job/runs"), strategy=Strategy.TF_MULTIWORKER,
                      **kw)  # type: ignore[arg-type]


def test_every_rank_is_one_worker_task_with_a_free_port_per_host() -> None:
    alloc = allocate(parse_host_spec(HOSTS), None)
    cluster = tfcluster.tf_cluster(alloc, Strategy.TF_MULTIWORKER, 23456)
    workers = cluster["cluster"]["worker"]
    assert workers == ["gpu01:23456", "gpu01:23457", "gpu02:23456", "gpu02:23457",
                       "gpu02:23458"]
    assert cluster["tasks"] == [["worker", r] for r in range(5)]
    assert len(set(workers)) == len(workers)
    for rank in alloc.ranks:  # each task sits on its rank's host
        assert workers[rank.rank].startswith(f"{rank.host}:")


def test_each_rank_gets_its_own_tf_config() -> None:
    alloc = allocate(parse_host_spec(HOSTS), None)
    text = tfcluster.encode(tfcluster.tf_cluster(alloc, Strategy.TF_MULTIWORKER, 30000))
    for rank in range(5):
        config = tfconfig.tf_config(text, rank)
        assert config["task"] == {"type": "worker", "index": rank}
        assert config["cluster"] == json.loads(text)["cluster"]
    with pytest.raises(tfconfig.TfConfigError, match="no task for rank 5"):
        tfconfig.tf_config(text, 5)


def test_the_dry_run_shows_every_task_and_its_tf_config() -> None:
    spec = _spec(tf_port=30000)
    alloc = allocate(parse_host_spec(HOSTS), None)
    plan = make_plan(spec, alloc, PlanInputs(run_id="R1", environ={"PATH": "/usr/bin"},
                                             is_root=True, python="/venv/bin/python"))
    assert_golden("plan/tf_multiworker.txt", plan.describe() + "\n")
    env = dict(plan.command.env)
    assert json.loads(env[envvars.TF_CLUSTER])["cluster"]["worker"][2] == "gpu02:30000"
    assert f"-x {envvars.TF_CLUSTER}" in plan.display_argv


def test_apply_sets_tf_config_and_refuses_a_users_own_or_a_taken_port() -> None:
    alloc = allocate(parse_host_spec("localhost:2"), None)
    with socket.socket() as probe:  # a port nobody uses now, and the next one
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    port = min(port, 64000)
    text = tfcluster.encode(tfcluster.tf_cluster(alloc, Strategy.TF_MULTIWORKER, port))
    environ = {envvars.TF_CLUSTER: text, "OMPI_COMM_WORLD_RANK": "1"}
    config = tfconfig.apply(environ)
    assert config is not None and json.loads(environ["TF_CONFIG"])["task"]["index"] == 1
    assert tfconfig.apply({"PATH": "/bin"}) is None  # Horovod jobs: nothing set
    with pytest.raises(tfconfig.TfConfigError, match="TF_CONFIG is already set"):
        tfconfig.apply({envvars.TF_CLUSTER: text, "TF_CONFIG": "{}"}, rank=0)
    with socket.socket() as taken:
        taken.bind(("", port))
        taken.listen()
        with pytest.raises(tfconfig.TfConfigError, match=f"port {port} on .* is in use"):
            tfconfig.apply({envvars.TF_CLUSTER: text}, rank=0)


@pytest.mark.parametrize("kw", [{"backend": Backend.HOROVODRUN},
                                {"backend": Backend.HOROVODRUN, "gloo": True},
                                {"tf_port": 80}])
def test_options_that_cannot_apply_are_usage_errors(kw: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        _spec(**kw)
