"""``launch --elastic`` (issue 24, item 2): the spec it builds, horovodrun's elastic command
line and discovery script, and supervision that names a lost rank instead of ending the job."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ringtrain.assembly import LaunchOptions, build_spec
from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.elastic.watch import ElasticWatch, lost
from ringtrain.launch.job.run import prepare
from ringtrain.launch.job.rundir import make_run_dir
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.launch.record.absorbed import Absorbed
from ringtrain.launch.record.snapshot import Progress, RankState, Restored, Snapshot
from ringtrain.launch.supervise.detect import check
from ringtrain.spec import Backend, ElasticPolicy, EnvSpec, LaunchSpec, SupervisionPolicy

POLICY = SupervisionPolicy(start_timeout=30, heartbeat_timeout=10, stall_timeout=60)
ALLOC = allocate(parse_host_spec("gpu01:1,gpu02:1,gpu03:1"))


def _rank(rank: int, host: str, heard: float, *, connected: bool = True,
          done_at: float | None = None) -> RankState:
    return RankState(rank, host, 100 + rank, connected=connected, init_begun=True,
                     initialized=True, last_heard=heard, done_at=done_at)


def test_elastic_picks_horovodrun_with_gloo_and_checks_its_sizes(tmp_path: Path) -> None:
    spec = build_spec(LaunchOptions(script="t.py", elastic=True, np=4, min_np=2, max_np=6,
                                    blacklist_cooldown_range=(30, 120)), tmp_path)
    assert spec.backend is Backend.HOROVODRUN and spec.gloo
    assert spec.elastic == ElasticPolicy(min_np=2, max_np=6, cooldown_range=(30, 120))
    assert LaunchSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    with pytest.raises(UsageError, match="--elastic runs Horovod's elastic driver"):
        build_spec(LaunchOptions(script="t.py", elastic=True, backend="mpirun"), tmp_path)
    with pytest.raises(UsageError, match="--min-np <= -np <= --max-np; got 5 <= 4"):
        build_spec(LaunchOptions(script="t.py", elastic=True, np=4, min_np=5), tmp_path)
    with pytest.raises(UsageError, match="--max-np 6 is for --elastic"):
        build_spec(LaunchOptions(script="t.py", max_np=6), tmp_path)
    with pytest.raises(UsageError, match="horovodrun and Gloo do not apply"):
        build_spec(LaunchOptions(script="t.py", elastic=True, strategy="tf-multiworker"),
                   tmp_path)


def test_horovodrun_gets_its_elastic_flags_and_a_discovery_script(tmp_path: Path) -> None:
    spec = build_spec(LaunchOptions(script="t.py", elastic=True, min_np=2, max_np=4,
                                    runs_dir=tmp_path / "runs"), tmp_path)
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin"}, False, "/venv/bin/python"),
                        extra_env=(("HOROVOD_GLOO_IFACE", "eth0"),))
    plan = make_plan(spec, ALLOC, inputs)
    argv = list(plan.command.argv)
    discovery = plan.attempt_dir / "discover-hosts"
    # horovodrun with one driver rule changed (hvd_driver.py), isolated from the working dir
    assert argv[:5] == ["/venv/bin/python", "-I", "-m", "ringtrain.hvd_driver", "-np"]
    assert "-H" not in argv
    assert argv[argv.index("--min-np"):argv.index("--gloo")] == [
        "--min-np", "2", "--max-np", "4", "--host-discovery-script", str(discovery),
        "--elastic-timeout", "600", "--blacklist-cooldown-range", "60", "240",
        "--network-interface", "eth0"]
    prepare(plan, make_run_dir(plan.run_dir))
    # what Horovod's own elastic driver reads from it (its HostDiscoveryScript, the oracle)
    from horovod.runner.elastic.discovery import HostDiscoveryScript

    found = HostDiscoveryScript(str(discovery), None).find_available_hosts_and_slots()
    assert found == {"gpu01": 1, "gpu02": 1, "gpu03": 1}
    assert oct(discovery.stat().st_mode & 0o777) == "0o700"
    # a peer that dies while the ring forms again holds the others one Gloo timeout, not five
    assert ("HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR", "1") in plan.command.env
    mine = build_spec(LaunchOptions(script="t.py", elastic=True, runs_dir=tmp_path / "runs",
                                    env=(EnvSpec.parse("HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR=3",
                                                       plain=True),)), tmp_path)
    assert ("HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR", "3") in make_plan(mine, ALLOC,
                                                                      inputs).command.env
    plain = build_spec(LaunchOptions(script="t.py", backend="horovodrun", gloo=True,
                                     runs_dir=tmp_path / "runs"), tmp_path)
    assert "HOROVOD_GLOO_CONNECT_TIMEOUT_FACTOR" not in dict(
        make_plan(plain, ALLOC, inputs).command.env)  # Gloo's own outside --elastic


def test_under_elastic_a_lost_rank_is_not_a_fault_but_a_stall_is() -> None:
    gone = (_rank(0, "gpu01", 99), _rank(1, "gpu02", 99), _rank(2, "gpu03", 50, connected=False))
    silent = (_rank(0, "gpu01", 99), _rank(1, "gpu02", 99), _rank(2, "gpu03", 80))
    for ranks in (gone, silent):
        assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, 0, elastic=True) is None
    assert check(Snapshot(silent, None, now=100), ALLOC, POLICY, 0) is not None  # not elastic
    stalled = Snapshot(gone[:2], Progress(epoch=1, at=10), now=100)
    fault = check(stalled, ALLOC, POLICY, 0, elastic=True)
    assert fault is not None and "no training progress for 90 s" in fault.message
    never = Snapshot((RankState(0, "gpu01", 100, last_heard=99),), None, now=100)
    fault = check(never, ALLOC, POLICY, 0, elastic=True)  # the job never formed
    assert fault is not None and "ranks 1,2 on gpu02, gpu03 have not started" in fault.message


def test_each_lost_rank_is_named_once_with_its_own_host_and_time_to_training_again() -> None:
    where = {0: "gpu01", 1: "gpu02", 2: "gpu03"}  # the allocation's; Horovod placed otherwise
    ranks = (_rank(0, "gpu01", 99), _rank(1, "gpu03", 60, connected=False),
             _rank(2, "gpu02", 99, done_at=98))
    (loss,) = lost(Snapshot(ranks, None, now=100), where, 10, frozenset(), started=40)
    assert (loss.rank, loss.host, loss.at) == (1, "gpu03", 60)
    notes: list[str] = []
    watch = ElasticWatch(where, 10, started=40)
    watch.tick(Snapshot(ranks, Progress(epoch=2, at=95), now=100), notes.append)
    watch.tick(Snapshot(ranks, Progress(epoch=2, at=99), now=103), notes.append)
    assert len(notes) == 1 and notes[0].startswith(
        "elastic: rank 1 on gpu03 ended before its script returned")
    watch.tick(Snapshot(ranks, Progress(epoch=2, at=104.5), now=105), notes.append)
    (incident,) = watch.incidents
    assert incident.ttta_s == pytest.approx(4.5) and notes[-1] == (
        "elastic: training again 4.5 s after rank 1 was lost")
    assert Absorbed.from_json(incident.to_json()) == incident
    assert incident.describe().endswith("(killed or crashed); training again 4.5 s")


def test_the_ledger_shows_each_elastic_step_after_a_loss() -> None:
    """ringtrain.keras's ranks say when they reset and rank 0 where it restored the state from;
    each incident keeps the first of each, as seconds after the loss (a survivor's collective
    may fail just before the launcher sees the lost connection: a negative reset)."""
    from ringtrain.launch.record.snapshot import Restored

    where = {0: "gpu01", 1: "gpu02"}
    ranks = (replace(_rank(0, "gpu01", 99), ring=1, ring_at=45),
             _rank(1, "gpu02", 60, connected=False))
    notes: list[str] = []
    aborted: list[int] = []
    cut: list[str] = []
    watch = ElasticWatch(where, 10, started=40, abort=lambda r: aborted.append(r) or 1,
                         cut=lambda h: cut.append(h) or 1)
    early = Restored(90.0, 0, 1, 0, 2, 1000)  # before the loss: not this incident's
    restored = Restored(100.8, 0, 3, 10, 1, 220_000)
    watch.tick(Snapshot(ranks, None, now=100, resets=(50.0, 99.8, 100.2), restores=(early,)),
               notes.append)
    reformed = (replace(ranks[0], ring=2, ring_at=100.5), ranks[1])  # rank 0's new ring
    watch.tick(Snapshot(reformed, Progress(epoch=3, at=101.5), now=102,
                        resets=(50.0, 99.8, 100.2), restores=(early, restored)), notes.append)
    (incident,) = watch.incidents
    assert [(k, None if v is None else round(v, 1)) for k, v in incident.stages()] == [
        ("reset", -0.2), ("ring formed", 0.5), ("restored", 0.8), ("training again", 1.5)]
    # the survivors told to abort the lost rank's ring, once; its process ended, so
    # Horovod's ssh to its host ends by itself: not cut
    assert aborted == [1] and cut == []
    assert "1 survivor(s) told to abort that ring now" in notes[0]
    text = "rank 0's memory commit (epoch 3 step 10, 0.22 MB; world of 1)"
    assert incident.restored_from == text
    assert f"elastic: state restored from {text} 0.8 s after rank 1 was lost" in notes
    assert incident.describe().endswith(
        f"reset -0.2 s, ring formed 0.5 s, restored 0.8 s, training again 1.5 s; "
        f"state from {text}")
    assert Absorbed.from_json(incident.to_json()) == incident


def test_a_silent_host_is_cut_from_horovods_driver_once_and_its_ring_aborted() -> None:
    """A rank silent past the heartbeat timeout (its host cut off): the survivors abort its
    ring and Horovod's ssh to its host is ended, each once; a rank only slow is left alone."""
    where = {0: "gpu01", 1: "gpu02", 2: "gpu03"}
    aborted: list[int] = []
    cut: list[str] = []
    watch = ElasticWatch(where, 10, started=0, abort=lambda r: aborted.append(r) or 2,
                         cut=lambda h: cut.append(h) or 1)
    slow = (_rank(0, "gpu01", 99), _rank(1, "gpu02", 95), _rank(2, "gpu03", 91))
    watch.tick(Snapshot(slow, None, now=100), lambda _: None)  # 9 s: not yet silent
    assert aborted == [] and cut == [] and watch.incidents == []
    notes: list[str] = []
    for now in (102, 103):
        watch.tick(Snapshot(slow, None, now=now), notes.append)
    assert aborted == [2] and cut == ["gpu03"]
    assert "Horovod's ssh to gpu03 ended, so its driver re-forms now" in notes[0]


def test_the_discovery_script_lists_every_host_the_pre_flight_passed(tmp_path: Path) -> None:
    """--max-np can grow the job onto the pre-flight's other slots; the user's interface name
    wins over the probe's; a ':' in the run directory would split horovodrun's PATH."""
    spec = build_spec(LaunchOptions(script="t.py", elastic=True, np=2, max_np=4,
                                    network_interface="ib0", runs_dir=tmp_path / "runs"),
                      tmp_path)
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin"}, False, "/venv/bin/python"),
                        extra_env=(("HOROVOD_GLOO_IFACE", "eth0"),),
                        elastic_hosts=(("gpu01", 2), ("gpu02", 2)))
    plan = make_plan(spec, allocate(parse_host_spec("gpu01:2,gpu02:2"), 2), inputs)
    assert plan.elastic_hosts_text == "gpu01:2\ngpu02:2\n"
    argv = list(plan.command.argv)
    assert argv[argv.index("--network-interface") + 1] == "ib0"
    assert dict(plan.command.env)["PATH"].startswith(str(plan.attempt_dir / "bin") + ":")
    colon = build_spec(LaunchOptions(script="t.py", elastic=True, runs_dir=tmp_path / "a:b"),
                       tmp_path)
    with pytest.raises(UsageError, match="has a ':', which PATH cannot hold"):
        make_plan(colon, allocate(parse_host_spec("gpu01:2,gpu02:2"), None), inputs)
    local = make_plan(spec, allocate(parse_host_spec("localhost:2"), None),
                      PlanInputs(SessionEnv("R2", {}, False, "/py")))
    local_argv = list(local.command.argv)  # --no-probe on one host: still no 2-host wait
    assert local_argv[local_argv.index("--network-interface") + 1] == "ib0"
    bare = build_spec(LaunchOptions(script="t.py", elastic=True, runs_dir=tmp_path), tmp_path)
    lone = make_plan(bare, allocate(parse_host_spec("localhost:2"), None),
                     PlanInputs(SessionEnv("R3", {}, False, "/py")))
    assert list(lone.command.argv)[list(lone.command.argv).index("--network-interface") + 1] == (
        "lo")
    with pytest.raises(UsageError, match=r"got 3 <= - <= 2"):
        build_spec(LaunchOptions(script="t.py", elastic=True, min_np=3, max_np=2), tmp_path)


def test_an_exit_hang_and_a_stall_are_judged_over_the_ranks_not_lost() -> None:
    """A lost rank never says it is done: the others finishing is the end of training, and a
    shutdown that then hangs is an exit hang (a success), not a stall."""
    from ringtrain.launch.supervise.detect import live_done

    ranks = (_rank(0, "gpu01", 99, done_at=50), _rank(1, "gpu02", 99, done_at=51),
             _rank(2, "gpu03", 40, connected=False))
    snap = Snapshot(ranks, Progress(epoch=3, at=45), now=100)
    assert live_done(snap)
    assert check(snap, ALLOC, POLICY, 0, elastic=True) is None  # within --exit-grace
    late = Snapshot(ranks, Progress(epoch=3, at=45), now=200)
    fault = check(late, ALLOC, POLICY, 0, elastic=True)
    assert fault is not None and fault.kind.value == "exit-hang"
    never = check(Snapshot((RankState(0, "gpu01", 100, last_heard=99),), None, now=100), ALLOC,
                  POLICY, 0, elastic=True)
    assert never is not None and never.hosts == ()  # Horovod placed the ranks: no host named


def test_spares_are_held_back_from_the_plan_and_only_with_elastic(tmp_path: Path) -> None:
    spec = build_spec(LaunchOptions(script="t.py", elastic=True, spares=1), tmp_path)
    assert spec.elastic is not None and spec.elastic.spares == 1
    with pytest.raises(UsageError, match="--spares 1 is for --elastic"):
        build_spec(LaunchOptions(script="t.py", spares=1), tmp_path)
    from ringtrain.hostfile import Inventory
    from ringtrain.launch.elastic.spares import without_spares

    inventory = Inventory(ALLOC.hosts, "test")
    assert without_spares(inventory, spec.elastic).names == ("gpu01", "gpu02")
    assert without_spares(inventory, None) == inventory


def test_the_live_line_counts_the_ranks_running_once_more_joined_than_placed() -> None:
    from ringtrain.launch.supervise.status import describe_arrivals

    two = allocate(parse_host_spec("gpu01:1,gpu02:1"))
    snap = Snapshot((_rank(0, "gpu01", 99), _rank(1, "gpu02", 50, connected=False),
                     _rank(2, "gpu03", 99)), None, now=100)
    assert describe_arrivals(snap, two) == (
        "ranks running 2 (placed with 2) [gpu01 1 gpu03 1], hvd.init done 2")


def test_training_again_counts_only_progress_after_a_ring_formed_since_the_loss() -> None:
    """A survivor's last batches of the old world can report just after the loss is named:
    that is not training again (it released the held discovery list at once, which reached
    Horovod's driver as a second "hosts updated" reset). Progress after a new ring is."""
    where = {0: "gpu01", 1: "gpu02"}
    ranks = (replace(_rank(0, "gpu01", 99), ring=1, ring_at=45),
             _rank(1, "gpu02", 60, connected=False))
    notes: list[str] = []
    watch = ElasticWatch(where, 10, started=40)
    watch.tick(Snapshot(ranks, Progress(epoch=2, at=100.2), now=100.3), notes.append)
    (incident,) = watch.incidents
    assert incident.training_again is None  # the old world's last batch
    reformed = (replace(ranks[0], ring=2, ring_at=104.0), ranks[1])
    watch.tick(Snapshot(reformed, Progress(epoch=2, at=103.0), now=104.1), notes.append)
    assert watch.incidents[0].training_again is None  # still before the new ring
    watch.tick(Snapshot(reformed, Progress(epoch=2, at=105.0), now=105.1), notes.append)
    assert watch.incidents[0].ttta_s == pytest.approx(4.7)  # named lost at 100.3
    assert notes[-1] == "elastic: training again 4.7 s after rank 1 was lost"


def test_a_lone_survivor_that_trains_again_before_the_loss_is_named_is_training_again() -> None:
    """Two ranks, one killed: the survivor resets at once, forms a ring of one and restores
    its state before the launcher's tick names the loss. Its ring and restore count for the
    loss (they came after its reset for it), so its next progress is training again (this
    released a held spare only after SPARE_DELAY_S)."""
    where = {0: "gpu01", 1: "gpu02"}
    ranks = (replace(_rank(0, "gpu01", 100.2), ring=1, ring_at=100.0),
             _rank(1, "gpu02", 99.5, connected=False))
    notes: list[str] = []
    watch = ElasticWatch(where, 10, started=40)
    snap = Snapshot(ranks, Progress(epoch=3, at=100.25), now=100.3, resets=(99.8,),
                    restores=(Restored(100.05, 0, 3, 0, 1, 220_000),))
    watch.tick(snap, notes.append)
    (incident,) = watch.incidents
    assert incident.reset == pytest.approx(59.8) and incident.formed == pytest.approx(60.0)
    assert incident.restored == pytest.approx(60.05)
    assert incident.training_again == pytest.approx(60.25)
    assert notes[-1] == "elastic: training again 0.0 s after rank 1 was lost"
