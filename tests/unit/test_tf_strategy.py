"""--strategy tf-multiworker: the cluster from the allocation (every rank a worker task, listed
once, ports distinct on each host), the plan's dry run, each rank's TF_CONFIG and the errors a
user can meet (horovodrun, a TF_CONFIG of their own, a port in use)."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest

from ringtrain.errors import AllocationError, UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.plan import tfcluster
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.rank import envvars, tfconfig
from ringtrain.spec import Backend, LaunchSpec, Strategy
from tests.golden import assert_golden

HOSTS = "gpu01:2,gpu02:3"


def _spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {"host_spec": HOSTS, "strategy": Strategy.TF_MULTIWORKER}
    base.update(kw)
    return LaunchSpec(script="train.py", working_dir=Path("/work/job"),
                      runs_dir=Path("/work/job/runs"), **base)  # type: ignore[arg-type]


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


def test_tasks_listen_at_a_hosts_address_when_it_has_one() -> None:
    # Slurm's NodeAddr: the node name gpu02 need not resolve; 10.1.1.17 is where it is reached
    hosts = parse_host_spec(HOSTS)
    hosts = dataclasses.replace(hosts, hosts=(
        hosts.hosts[0], dataclasses.replace(hosts.hosts[1], address="10.1.1.17")))
    alloc = allocate(hosts, None)
    cluster = tfcluster.tf_cluster(alloc, Strategy.TF_MULTIWORKER, 23456)
    assert cluster["cluster"]["worker"] == ["gpu01:23456", "gpu01:23457", "10.1.1.17:23456",
                                            "10.1.1.17:23457", "10.1.1.17:23458"]
    # the port check asks each host by its name for its own ports
    assert tfcluster.ports_by_host(alloc, _spec(tf_port=23456)) == {
        "gpu01": [23456, 23457], "gpu02": [23456, 23457, 23458]}


def test_two_hosts_at_one_address_are_refused_naming_both() -> None:
    hosts = parse_host_spec(HOSTS)
    hosts = dataclasses.replace(hosts, hosts=tuple(
        dataclasses.replace(h, address="127.0.0.1") for h in hosts.hosts))
    with pytest.raises(AllocationError, match=r"gpu01 and gpu02 are both at 127\.0\.0\.1") as err:
        tfcluster.tf_cluster(allocate(hosts, None), Strategy.TF_MULTIWORKER, 23456)
    assert "NodeAddr" in err.value.hint
    one = allocate(hosts, 2)  # both ranks on gpu01: one host, no clash
    assert tfcluster.tf_cluster(one, Strategy.TF_MULTIWORKER, 23456)["cluster"]["worker"] == [
        "127.0.0.1:23456", "127.0.0.1:23457"]


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
    plan = make_plan(spec, alloc, PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin"},
                                                        True, "/venv/bin/python")))
    assert_golden("plan/tf_multiworker.txt", plan.describe() + "\n")
    env = dict(plan.command.env)
    assert json.loads(env[envvars.TF_CLUSTER])["cluster"]["worker"][2] == "gpu02:30000"
    assert f"-x {envvars.TF_CLUSTER}" in plan.display_argv


def test_apply_sets_tf_config_and_refuses_a_users_own_or_a_taken_port() -> None:
    alloc = allocate(parse_host_spec("localhost:2"), None)
    with socket.socket() as probe:  # a port nobody uses now
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    port = min(port, 64000)
    text = tfcluster.encode(tfcluster.tf_cluster(alloc, Strategy.TF_MULTIWORKER, port))
    environ = {envvars.TF_CLUSTER: text, "OMPI_COMM_WORLD_RANK": "0"}  # on the free port
    config = tfconfig.apply(environ)
    assert config is not None and json.loads(environ["TF_CONFIG"])["task"]["index"] == 0
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


def _ps_alloc(hosts: str = HOSTS, ps: int = 2):  # type: ignore[no-untyped-def]
    spec = _spec(strategy=Strategy.TF_PS, ps=ps, host_spec=hosts)
    return spec, tfcluster.with_tasks(allocate(parse_host_spec(hosts), None), spec)


def test_tf_ps_adds_a_chief_and_spread_ps_tasks_to_the_workers() -> None:
    spec, alloc = _ps_alloc()
    assert [(h.name, h.slots) for h in alloc.hosts] == [("gpu01", 4), ("gpu02", 4)]
    cluster = tfcluster.cluster_for(alloc, spec)
    assert cluster["tasks"] == [["chief", 0], ["ps", 0], ["worker", 0], ["worker", 1],
                                ["ps", 1], ["worker", 2], ["worker", 3], ["worker", 4]]
    assert cluster["cluster"] == {
        "chief": ["gpu01:23456"],
        "worker": ["gpu01:23458", "gpu01:23459", "gpu02:23457", "gpu02:23458", "gpu02:23459"],
        "ps": ["gpu01:23457", "gpu02:23456"],
    }
    by_rank = {r.rank: r.host for r in alloc.ranks}
    for rank, (kind, index) in enumerate(cluster["tasks"]):  # each task on its rank's host
        assert cluster["cluster"][kind][index].startswith(by_rank[rank] + ":")
    addresses = [a for tasks in cluster["cluster"].values() for a in tasks]
    assert len(addresses) == len(set(addresses)) == alloc.np  # every task listed once
    assert tfcluster.with_tasks(alloc, _spec()) is alloc  # other strategies: as allocated


def test_more_ps_tasks_than_hosts_wrap_around() -> None:
    spec, alloc = _ps_alloc("a:1,b:1", ps=3)
    cluster = tfcluster.cluster_for(alloc, spec)
    assert cluster["cluster"]["ps"] == ["a:23457", "a:23458", "b:23456"]  # by rank
    assert [t[0] for t in cluster["tasks"]] == ["chief", "ps", "ps", "worker", "ps", "worker"]


def test_the_tf_ps_dry_run_golden() -> None:
    spec, alloc = _ps_alloc()
    plan = make_plan(spec, alloc, PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin"},
                                                        True, "/venv/bin/python")))
    assert_golden("plan/tf_ps.txt", plan.describe() + "\n")
    assert plan.hostfile_text == "gpu01 slots=4\ngpu02 slots=4\n"


@pytest.mark.parametrize("kw", [{"strategy": Strategy.TF_PS},
                                {"strategy": Strategy.TF_MULTIWORKER, "ps": 1},
                                {"strategy": Strategy.HOROVOD, "ps": 2}])
def test_ps_goes_with_tf_ps_only(kw: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="--ps") as err:
        _spec(**kw)
    assert "tf-ps" in f"{err.value} {err.value.hint}"


def test_servers_are_told_to_finish_once_the_chief_is_done_and_gone() -> None:
    from ringtrain.launch.record.snapshot import RankState, Snapshot
    from ringtrain.launch.supervise.server_finisher import ServerFinisher

    sent: list[str] = []
    notes: list[str] = []
    finisher = ServerFinisher(sent.append)

    def snap(now: float, **chief: object) -> Snapshot:
        ranks = (RankState(0, "gpu01", 10, **chief),  # type: ignore[arg-type]
                 RankState(1, "gpu01", 11), RankState(2, "gpu02", 12))
        return Snapshot(ranks, None, now)

    finisher.tick(snap(100.0), notes.append)  # training
    finisher.tick(snap(101.0, done_at=100.5), notes.append)  # said done, still finalising
    assert sent == [] and notes == []
    finisher.tick(snap(102.0, done_at=100.5, connected=False), notes.append)  # its process is gone
    finisher.tick(snap(103.0, done_at=100.5, connected=False), notes.append)
    assert sent == ["finish", "finish"] and len(notes) == 1
    hung = ServerFinisher(sent.append)
    sent.clear()
    hung.tick(snap(110.0, done_at=100.5), notes.append)  # done 9.5 s ago and still connected: wait
    assert sent == []
    hung.tick(snap(111.0, done_at=100.5), notes.append)  # past the 10 s grace
    assert sent == ["finish"]


def test_ps_hosts_own_puts_the_ps_tasks_on_hosts_without_workers() -> None:
    spec = _spec(strategy=Strategy.TF_PS, ps=3, ps_hosts="own",
                 host_spec="gpu01:2,gpu02:2,gpu03:1,gpu04:1")
    inventory = parse_host_spec("gpu01:2,gpu02:2,gpu03:1,gpu04:1")
    workers = allocate(inventory, 4)  # gpu01 and gpu02; gpu03 and gpu04 spare
    alloc = tfcluster.with_tasks(workers, spec, inventory.hosts[2:])
    assert [(h.name, h.slots) for h in alloc.hosts] == [
        ("gpu01", 3), ("gpu02", 2), ("gpu03", 2), ("gpu04", 1)]
    cluster = tfcluster.cluster_for(alloc, spec)
    assert cluster["cluster"] == {
        "chief": ["gpu01:23456"],
        "worker": ["gpu01:23457", "gpu01:23458", "gpu02:23456", "gpu02:23457"],
        "ps": ["gpu03:23456", "gpu03:23457", "gpu04:23456"],
    }
    assert [t[0] for t in cluster["tasks"]] == ["chief", "worker", "worker", "worker", "worker",
                                                "ps", "ps", "ps"]
    with pytest.raises(AllocationError, match="none is left for the parameter servers"):
        tfcluster.with_tasks(workers, spec, ())


def test_ps_hosts_own_goes_with_tf_ps() -> None:
    with pytest.raises(UsageError, match="--ps-hosts own is for --strategy tf-ps"):
        _spec(ps_hosts="own")
