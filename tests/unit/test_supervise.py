"""Pure supervision decisions: fault checks on snapshots, restart decisions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.result import Failure, FailureKind, JobResult, JobState, RankFailure
from ringtrain.launch.record.snapshot import Progress, RankState, Snapshot
from ringtrain.launch.recover.outcome import Ending, decide
from ringtrain.launch.recover.outcome import merge as _merge
from ringtrain.launch.supervise.detect import all_done, check, never_started, usage_warnings
from ringtrain.launch.supervise.teardown import job_pids
from ringtrain.spec import RestartPolicy, SupervisionPolicy

ALLOC = allocate(parse_host_spec("gpu01:2,gpu02:2"))
POLICY = SupervisionPolicy(start_timeout=30, heartbeat_timeout=10, stall_timeout=60)


def _rank(
    rank: int,
    heard: float,
    *,
    init: bool = True,
    begun: bool | None = None,
    connected: bool = True,
    done_at: float | None = None,
    api: tuple[str, ...] = (),
) -> RankState:
    return RankState(
        rank=rank,
        host=f"node{rank // 2}",
        pid=100 + rank,
        start=5000 + rank,
        ppid=90,
        parent="orted",
        parent_start=4000,
        connected=connected,
        init_begun=init if begun is None else begun,
        initialized=init,
        last_heard=heard,
        done_at=done_at,
        api=api,
    )


def test_healthy_job_has_no_fault() -> None:
    snap = Snapshot(tuple(_rank(r, 99) for r in range(4)), Progress(epoch=1, at=95), now=100)
    assert check(snap, ALLOC, POLICY, started=0) is None


def test_host_lost_when_all_its_ranks_are_silent() -> None:
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 85), _rank(3, 88))
    fault = check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.HOST_LOST
    assert fault.hosts == ("gpu02",) and fault.ranks == (2, 3)
    assert "gpu02 silent for 12 s" in fault.message


def test_one_silent_rank_is_named_with_host_and_pid_not_taken_for_a_lost_host() -> None:
    """A SIGSTOPped rank: its host still answers through rank 3, so the host is not lost, but
    the rank is named within the heartbeat bound (it used to wait for the stall timeout)."""
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 95), _rank(3, 99))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 80), _rank(3, 99))
    fault = check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.RANK_SILENT
    assert fault.hosts == ("gpu02",) and fault.ranks == (2,)
    assert fault.message.startswith("rank 2 on gpu02 (pid 102) silent for 20 s")
    assert FailureKind.RANK_SILENT.exit_code == 22


def test_a_host_going_quiet_is_a_lost_host_not_its_first_silent_rank() -> None:
    """A cut link silences every rank of a host at once, but their last beats were up to a
    second apart: the first passes the timeout while the last has not. That is not "one rank
    silent while its host answers" (bench/launcher/control_scale.py named it so at 8,000 ranks)."""
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 89.5), _rank(3, 90.4))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None
    fault = check(Snapshot(ranks, None, now=100.5), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.HOST_LOST
    assert fault.hosts == ("gpu02",) and fault.ranks == (2, 3)


def test_exited_ranks_do_not_count_as_silent() -> None:
    ranks = (
        _rank(0, 99),
        _rank(1, 99),
        _rank(2, 10, connected=False),
        _rank(3, 10, connected=False),
    )
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None


def test_a_host_whose_ranks_finished_their_script_is_not_lost_while_they_exit() -> None:
    """Interpreter finalisation (TensorFlow, Horovod) can silence a rank for longer than the
    heartbeat timeout on a loaded host; a rank that said "done" is not taken for a dead host."""
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 70, done_at=70), _rank(3, 71, done_at=71))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None
    # one rank of that host still training and silent: the host is lost
    ranks = (_rank(0, 99), _rank(1, 99), _rank(2, 70, done_at=70), _rank(3, 71))
    fault = check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.HOST_LOST and fault.ranks == (3,)


def test_every_rank_done_but_no_exit_is_ended_after_the_grace() -> None:
    done = tuple(_rank(r, 10, done_at=10) for r in range(4))
    progress = Progress(epoch=3, at=9)  # no stall either: the scripts are over
    assert check(Snapshot(done, progress, now=10 + 120), ALLOC, POLICY, started=0) is None
    fault = check(Snapshot(done, progress, now=10 + 121), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.EXIT_HANG
    assert all_done(Snapshot(done, None, now=1), ALLOC)
    assert not all_done(Snapshot(done[:3], None, now=1), ALLOC)


def test_usage_warnings_say_what_could_not_take_effect() -> None:
    plain = tuple(_rank(r, 9, begun=False, init=False) for r in range(4))
    warnings = usage_warnings(Snapshot(plain, None, now=10), ALLOC, POLICY, True)
    assert len(warnings) == 3
    assert "--checkpoint was given but no rank used" in warnings[0]
    assert "--stall-timeout was given but no rank reported progress" in warnings[1]
    assert "no rank called hvd.init(): the 4 ranks ran as 4 independent copies" in warnings[2]
    used = tuple(_rank(r, 9, api=("checkpoint", "progress") if r == 0 else ()) for r in range(4))
    quiet = SupervisionPolicy()  # no --stall-timeout given
    assert usage_warnings(Snapshot(used, Progress(epoch=1, at=9), now=10), ALLOC, quiet,
                          True) == ()
    assert usage_warnings(Snapshot((), None, now=10), ALLOC, POLICY, True) == ()  # unsupervised


def test_merge_counts_a_finished_job_as_a_success_whatever_its_exit() -> None:
    crashed_at_exit = _result(exit_code=134, failure=Failure(FailureKind.RANK_SIGNAL, "x"))
    ending = Ending(1.0, 2.0, {}, {}, finished=True)
    merged = _merge(crashed_at_exit, None, (), 1, ending)
    assert merged.state is JobState.SUCCEEDED and merged.exit_code == 0 and merged.failure is None
    assert "exited with code 134 while shutting down" in merged.warnings[0]
    hang = Fault(FailureKind.EXIT_HANG, "every rank finished its script but ...")
    assert _merge(_result(exit_code=137), hang, (), 1, ending).state is JobState.SUCCEEDED
    interrupted = _result(state=JobState.INTERRUPTED, exit_code=130)
    assert _merge(interrupted, None, (), 1, ending).state is JobState.INTERRUPTED
    unfinished = replace(ending, finished=False)
    assert _merge(crashed_at_exit, None, (), 1, unfinished).state is JobState.FAILED


def test_a_launcher_exiting_0_with_ranks_that_never_ran_is_a_failure() -> None:
    """Seen on the simulated Slurm cluster: a requeued job started again at once; srun said
    "task 0 launch failed: Unspecified error" (the last run's step was still being cleaned
    up) and exited 0 in 0.3 s. ringtrain called that a success."""
    checked_in = (_rank(0, 9), _rank(1, 9))
    tails = {0: ("Epoch 1/8",), 2: ("ringtrain rank agent: cannot reach the launcher ...",)}
    # rank 2 ran unsupervised (it said so); rank 3 neither checked in nor said a word
    assert never_started(Snapshot(checked_in, None, now=10), ALLOC, tails) == (3,)
    assert never_started(Snapshot((), None, now=10), ALLOC, {}) == (0, 1, 2, 3)
    ending = Ending(1.0, 2.0, {}, {0: "gpu01", 1: "gpu01", 2: "gpu02", 3: "gpu02"},
                    never_started=(0, 1, 2, 3))
    merged = _merge(_result(state=JobState.SUCCEEDED, exit_code=0), None, (), 1, ending)
    assert merged.state is JobState.FAILED and merged.exit_code == 1
    assert merged.failure is not None and merged.failure.kind is FailureKind.LAUNCHER
    assert merged.failure.message.startswith(
        "the launcher exited 0, but ranks 0, 1, 2, 3 never started (no check-in, no output)")
    assert merged.failure.hosts == ("gpu01", "gpu02")
    assert decide(merged, 1, RestartPolicy(max_restarts=1)).restart  # retried like a crash
    ran = replace(ending, never_started=())
    assert _merge(_result(state=JobState.SUCCEEDED, exit_code=0), None, (), 1,
                  ran).state is JobState.SUCCEEDED


def test_start_timeout_names_missing_ranks_and_hosts() -> None:
    ranks = (_rank(0, 99, init=False), _rank(1, 99, init=False), _rank(2, 99, init=False))
    assert check(Snapshot(ranks, None, now=20), ALLOC, POLICY, started=0) is None
    fault = check(Snapshot(ranks, None, now=31), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.START_TIMEOUT
    assert fault.ranks == (3,) and fault.hosts == ("gpu02",)
    assert "no check-in" in fault.message and "gpu01 2/2, gpu02 1/2" in fault.message


def test_start_timeout_names_ranks_that_never_reached_hvd_init() -> None:
    # ranks 0, 2, 3 entered hvd.init() and block there waiting for rank 1
    ranks = (
        _rank(0, 99, init=False, begun=True),
        _rank(1, 99, init=False),
        _rank(2, 99, init=False, begun=True),
        _rank(3, 99, init=False, begun=True),
    )
    fault = check(Snapshot(ranks, None, now=31), ALLOC, POLICY, started=0)
    assert fault is not None and fault.ranks == (1,) and fault.hosts == ("gpu01",)
    assert "have not reached hvd.init()" in fault.message


def test_start_timeout_when_every_rank_is_stuck_inside_hvd_init() -> None:
    ranks = tuple(_rank(r, 99, init=False, begun=True) for r in range(4))
    fault = check(Snapshot(ranks, None, now=31), ALLOC, POLICY, started=0)
    assert fault is not None and fault.ranks == (0, 1, 2, 3)
    assert "stuck inside hvd.init()" in fault.message


def test_script_without_horovod_is_not_a_start_hang() -> None:
    ranks = tuple(_rank(r, 99, init=False) for r in range(4))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None


def _forming(rank: int, heard: float, since: float) -> RankState:
    return replace(_rank(rank, heard, init=False), forming_since=since)


def test_ranks_waiting_for_their_tensorflow_cluster_are_neither_silent_nor_a_lost_host() -> None:
    """TensorFlow holds the GIL while a task waits for its peers, so the waiting ranks' beats
    stop: rank 3 starts late, its host mate and all of gpu01 wait 25 s without a beat."""
    ranks = (_forming(0, 75, 75), _forming(1, 75, 75), _forming(2, 75, 75),
             _rank(3, 99, init=False))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None
    # the same silences without the forming marks: a lost host, as before
    plain = tuple(replace(r, forming_since=None) for r in ranks)
    fault = check(Snapshot(plain, None, now=100), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.HOST_LOST


def test_a_silent_rank_beside_a_waiting_one_is_named_once_its_host_answers() -> None:
    # rank 2 waits in TensorFlow; rank 3 on the same host stopped beating for its own reasons.
    # The host cannot be judged while rank 2 waits (its beats stop too): not a lost host, which
    # would skip its teardown and leave it out of a restart.
    tf = {"init": False}  # a TF job: no hvd.init()
    ranks = (_rank(0, 99, **tf), _rank(1, 99, **tf), _forming(2, 80, 80), _rank(3, 80, **tf))
    assert check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0) is None
    # rank 2 joined its cluster and beats again: rank 3 is the silent one
    ranks = (_rank(0, 99, **tf), _rank(1, 99, **tf), _rank(2, 99, **tf), _rank(3, 80, **tf))
    fault = check(Snapshot(ranks, None, now=100), ALLOC, POLICY, started=0)
    assert fault is not None and fault.kind is FailureKind.RANK_SILENT and fault.ranks == (3,)


def test_a_cluster_that_never_forms_names_the_waiting_ranks_and_the_others() -> None:
    ranks = (_forming(0, 60, 60), _forming(1, 60, 60), _forming(2, 60, 60),
             _rank(3, 99, init=False))
    assert check(Snapshot(ranks, None, now=85), ALLOC, POLICY, started=0) is None  # 25 s
    fault = check(Snapshot(ranks, None, now=95), ALLOC, POLICY, started=0)  # 35 s > 30 s
    assert fault is not None and fault.kind is FailureKind.START_TIMEOUT
    # the culprit is the rank that never joined: its host, not the waiting ones', is named
    # (a restart leaves the named hosts out)
    assert fault.ranks == (3,) and fault.hosts == ("gpu02",)
    assert fault.message.startswith("ranks 0,1,2 waited 30 s in TensorFlow")
    assert fault.message.endswith("ranks 3 on gpu02 never joined it")
    every = tuple(_forming(r, 60, 60) for r in range(4))
    fault = check(Snapshot(every, None, now=95), ALLOC, POLICY, started=0)
    assert fault is not None and "every task is waiting" in fault.message
    assert fault.ranks == (0, 1, 2, 3)
    gone = (*ranks[:3], replace(ranks[3], connected=False))  # rank 3's connection dropped
    fault = check(Snapshot(gone, None, now=95), ALLOC, POLICY, started=0)
    assert fault is not None and fault.ranks == (0, 1, 2)


def test_stall_after_progress_stops() -> None:
    ranks = tuple(_rank(r, 199) for r in range(4))
    assert check(Snapshot(ranks, None, now=200), ALLOC, POLICY, started=0) is None
    fault = check(Snapshot(ranks, Progress(epoch=3, step=7, at=130), now=200), ALLOC, POLICY, 0)
    assert fault is not None and fault.kind is FailureKind.STALL and "epoch 3" in fault.message


def test_job_pids_include_daemons_with_start_times() -> None:
    snap = Snapshot((_rank(0, 1), _rank(2, 1)), None, now=2)
    assert job_pids(snap, ALLOC) == {"gpu01": {100: 5000, 90: 4000}, "gpu02": {102: 5002, 90: 4000}}


def _result(**kw: object) -> JobResult:
    base = {"state": JobState.FAILED, "exit_code": 1, "run_dir": Path("/r"), "duration_s": 1.0}
    return JobResult(**{**base, **kw})  # type: ignore[arg-type]


def test_decide_success_and_interrupt_never_restart() -> None:
    policy = RestartPolicy(max_restarts=3)
    assert not decide(_result(state=JobState.SUCCEEDED, exit_code=0), 1, policy).restart
    assert not decide(_result(state=JobState.INTERRUPTED, exit_code=130), 1, policy).restart


def test_decide_budget() -> None:
    assert decide(_result(), 1, RestartPolicy(max_restarts=1)).restart
    final = decide(_result(), 2, RestartPolicy(max_restarts=1))
    assert not final.restart and "budget spent (1 of 1)" in final.reason
    assert "no restarts asked" in decide(_result(), 1, RestartPolicy()).reason


def _failed(kind: FailureKind, *ranks: RankFailure, hosts: tuple[str, ...] = ()) -> JobResult:
    return _result(failure=Failure(kind, "x", hosts, ranks))


def test_decide_excludes_lost_and_killed_hosts_but_not_script_errors() -> None:
    policy = RestartPolicy(max_restarts=2)
    lost = _failed(FailureKind.HOST_LOST, hosts=("gpu02",))
    assert decide(lost, 1, policy).exclude == ("gpu02",)
    killed = _failed(FailureKind.RANK_SIGNAL, RankFailure(0, "gpu01", 137, "SIGKILL"),
                     hosts=("gpu01",))
    decision = decide(killed, 1, policy)  # suspected, avoided only if the others suffice
    assert decision.exclude == () and decision.suspect == ("gpu01",)
    script_error = _failed(FailureKind.RANK_EXIT, RankFailure(1, "gpu01", 1), hosts=("gpu01",))
    assert decide(script_error, 1, policy).exclude == ()


def test_decide_after_a_stall_does_not_blame_the_host_for_ringtrains_own_signals() -> None:
    """A stall is torn down by ringtrain (SIGTERM, then SIGKILL): that signal is no reason to
    suspect the host, or a restart on a small cluster would find every host excluded."""
    stalled = _failed(FailureKind.STALL, RankFailure(0, "gpu01", 137, "SIGKILL"),
                      hosts=("gpu01",))
    decision = decide(stalled, 1, RestartPolicy(max_restarts=1))
    assert decision.exclude == decision.suspect == ()


def test_merge_takes_the_faulty_ranks_tail_and_drops_the_teardown_signal() -> None:
    mpirun_view = _failed(FailureKind.RANK_SIGNAL,
                          RankFailure(0, "gpu01", 137, "SIGKILL", ("rank 0 line",)))
    fault = Fault(FailureKind.STALL, "no training progress for 30 s on rank 1", ("gpu02",), (1,))
    ending = Ending(10.0, 11.0, {0: ("rank 0 line",), 1: ("epoch 3", "stuck here")},
                    {0: "gpu01", 1: "gpu02"})
    merged = _merge(mpirun_view, fault, (), 1, ending)
    assert merged.failure is not None and merged.failure.kind is FailureKind.STALL
    root = merged.failure.root
    assert root is not None and (root.rank, root.host) == (1, "gpu02")
    assert root.log_tail == ("epoch 3", "stuck here") and root.signal_name is None
    data = merged.to_json()
    assert data["failed_rank"] == 1 and data["failed_host"] == "gpu02"
    assert data["signal"] is None and data["fault_kind"] == "stall"
    assert data["failure"]["ranks"][0]["log_tail"] == ["epoch 3", "stuck here"]


def test_three_restarts_without_a_new_commit_stop_the_crash_loop() -> None:
    """Issue 24: a job that crashes on every restart without committing anything new is not
    restarted forever; the decision says why. A new commit in between resets the count, a
    storage that could not be listed is no evidence either way, and a lost host or a hang is
    not the script's crash."""
    from ringtrain.launch.record.result import Failure, FailureKind, ResumePoint

    policy = RestartPolicy(max_restarts=10)
    crash = Failure(FailureKind.RANK_EXIT, "rank 1 failed")

    def run(*points: ResumePoint | None, kind: FailureKind = FailureKind.RANK_EXIT,
            ) -> list[JobResult]:
        failure = crash if kind is FailureKind.RANK_EXIT else Failure(kind, "host lost")
        return [_result(failure=failure, resume_point=p) for p in points]

    at = ResumePoint("s3://b/r", 40, 2, "x")
    later = ResumePoint("s3://b/r", 60, 3, "y")
    down = ResumePoint("s3://b/r", error="connection refused")
    assert decide(_result(), 3, policy, run(at, at, at)).restart  # two restarts so far
    stop = decide(_result(), 4, policy, run(at, at, at, at))
    assert not stop.restart and stop.reason.startswith("crash loop: 3 restarts in a row")
    assert "still at step 40" in stop.reason and "--stall-restarts 0" in stop.reason
    assert "none yet" in decide(_result(), 4, policy, run(None, None, None, None)).reason
    assert decide(_result(), 5, policy, run(at, at, at, later, later)).restart  # progress
    assert decide(_result(), 4, policy, run(at, at, down, at)).restart
    assert decide(_result(), 4, policy, run(at, at, at, at, kind=FailureKind.HOST_LOST)).restart
    assert decide(_result(), 4, RestartPolicy(max_restarts=10, stall_restarts=0),
                  run(None, None, None, None)).restart  # 0 turns the stop off
