"""A launch session: the attempts of one job, read top to bottom as the documented line.

``Session(spec, inventory, remote, reporter).run()`` loops over attempts, each:

    pre-flight -> place -> plan -> start -> supervise -> tear down -> decide

* pre-flight: the gate probes the candidate hosts (hosts that failed an earlier attempt sit out
  a cooldown) through the ``Remote`` seam and trims or refuses them;
* place: ``allocate`` (pure), -np on the first attempt, down to the restart's floor after;
* plan: ``make_plan`` (pure) with this attempt's control server address and token;
* start: ``run.start``, the one process starter (after the secrets file is written: ``deliver``);
* supervise: ``wait_or_fault`` polls the control server's snapshot (pure ``check``);
* tear down: the reaper on every host through the ``Remote`` seam, and on this machine;
* decide: ``decide()`` (pure) whether to go again and without which hosts;
* re-check, before a restart: the failed attempt's hosts must free their GPUs (``recheck``).

A restarted job resumes from its newest committed checkpoint: the training script finds it
through ``RINGTRAIN_CHECKPOINT_URL`` or ``$RINGTRAIN_RUN_DIR/checkpoints``, which stay the same
across attempts. The Session never prints: everything goes to the ``Reporter``.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from dataclasses import replace
from pathlib import Path

from ringtrain.checkpoint.location import Location
from ringtrain.errors import RingtrainError
from ringtrain.hostfile import Allocation, Inventory, allocate, placement_only, select
from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.elastic.sparekeeper import keeper_for
from ringtrain.launch.elastic.spares import without_spares
from ringtrain.launch.elastic.watch import ElasticWatch, elastic_world, seen_hosts
from ringtrain.launch.job.deliver import Delivery, start_with_secrets
from ringtrain.launch.job.run import Job
from ringtrain.launch.job.rundir import RunDir, make_run_dir
from ringtrain.launch.plan import tfcluster
from ringtrain.launch.plan.make import LaunchPlan, PlanInputs, hubs_for, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.launch.record.fault import Fault
from ringtrain.launch.record.milestones import Milestones, observe
from ringtrain.launch.record.result import FailureKind, HostTeardown, JobResult
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.recover.commits import check_storage, newest_commit, resumes_from
from ringtrain.launch.recover.hostrest import HostRest, check_floor, choose
from ringtrain.launch.recover.outcome import Ending, decide, merge
from ringtrain.launch.recover.preemption import DEFAULT_WAIT_S, Preemption, ask_commit
from ringtrain.launch.recover.recheck import recheck
from ringtrain.launch.reporter import NullReporter, Reporter
from ringtrain.launch.supervise.detect import (
    Watcher,
    all_done,
    live_done,
    never_started,
    rank_hosts,
    usage_warnings,
    wait_or_fault,
)
from ringtrain.launch.supervise.server_finisher import ServerFinisher
from ringtrain.launch.supervise.straggler import StragglerWatch
from ringtrain.launch.supervise.teardown import local_teardown, reap_hosts
from ringtrain.probe.gate import Preflight, run_gate
from ringtrain.probe.tfports import check_ports
from ringtrain.remote import Remote
from ringtrain.spec import GpuRule, LaunchSpec, StragglerAction, Strategy

log = logging.getLogger(__name__)
FAULT_GRACE_S = 1.0


class Session:
    def __init__(
        self,
        spec: LaunchSpec,
        inventory: Inventory,
        remote: Remote,
        reporter: Reporter | None = None,
        env: SessionEnv | None = None,
        preflight: Preflight | None = None,
    ) -> None:
        """``preflight``: the first attempt's, when a step before probed the hosts already
        (``--ring-check``): used once, not asked again."""
        self.spec, self.inventory, self.remote = spec, inventory, remote
        self._handed = preflight
        self.reporter: Reporter = reporter or NullReporter()
        self.env = env or SessionEnv.here()
        self.results: list[JobResult] = []  # one per finished attempt, with its decision
        self.rest = HostRest()  # hosts sitting out after failures (a value, replaced)
        self._live: tuple[Job | None, ControlServer] | None = None  # the running attempt
        self._stopped: int | None = None
        self.preemption: Preemption | None = None
        self._first_np: int | None = None
        self._started = time.monotonic()
        self._marks = Milestones()
        self._elastic: ElasticWatch | None = None  # --elastic: the running attempt's losses
        self._run_dir: RunDir | None = None

    @property
    def run_dir(self) -> Path:
        return (self.spec.runs_dir / self.env.run_id).absolute()

    def open_run_dir(self) -> RunDir:
        """The run directory, made and opened once (rundir.py): the run's files go through it."""
        if self._run_dir is None:
            self._run_dir = make_run_dir(self.run_dir, self.spec.trust_groups)
        return self._run_dir

    @property
    def checkpoint(self) -> Location:
        return self.spec.checkpoint or Location.default(self.run_dir)

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop the whole job now (from a signal handler): no restart follows."""
        self._stopped = signum
        if (live := self._live) is not None:
            job, control = live
            control.broadcast("stop")
            if job is not None:
                job.request_stop(self.spec.supervision.teardown_grace, signum=signum)

    def preempt(self, signal_name: str, wait_s: float = DEFAULT_WAIT_S) -> Preemption:
        """A preemption notice (from a signal handler's thread): rank 0 commits, the job ends."""
        self.preemption = ask_commit((self._live or (None, None))[1], signal_name, wait_s)
        self.stop(signal.SIGTERM)
        return self.preemption

    def run(self) -> JobResult:
        self._started = time.monotonic()
        # before any SSH: a launch that cannot log is refused; who runs it (launcher.json)
        self.open_run_dir().record_launcher()
        check_storage(self.spec.checkpoint, self.reporter.note)  # a URL that cannot work: no rank
        attempt = 1
        while True:
            try:  # placing it, or starting it (the secrets file, mpirun not found, ...)
                checked, alloc = self.place(attempt)
                result = self._attempt(attempt, alloc, checked)
            except RingtrainError as err:  # AllocationError, ProbeError, LaunchError, ...
                if not self.results:
                    raise  # nothing ran: the CLI reports it as a usage error
                return self._no_restart(err)
            result = replace(result, resume_point=newest_commit(self.checkpoint))
            decision = decide(result, attempt, self.spec.restart, (*self.results, result))
            restart = decision.restart and self._stopped is None
            reason = decision.reason if restart or not decision.restart else "stopped: no restart"
            result = replace(result, decision=reason,
                             excluded=decision.exclude if restart else ())
            self.results.append(result)
            final = self._write_summary(self.preemption.describe() if self.preemption else None)
            if not restart:
                return final
            self.rest = self.rest.after(decision, time.monotonic(), self.spec.restart.cooldown_s)
            what = result.failure.message if result.failure is not None else result.state.value
            self.reporter.note(f"incident: {what}; {decision.reason}"
                               + resumes_from(final.resume_point))
            self._recheck(alloc, checked)
            if self._stopped is not None:  # Ctrl-C during the re-check: no next attempt
                return self._write_summary(stop_reason="stopped by the user before the restart")
            attempt += 1

    def dry_plan(self) -> LaunchPlan:
        """The plan attempt 1 would run, through the same pre-flight and placement, without the
        control server's address and token (a dry run starts nothing)."""
        checked, alloc = self.place(1)
        return make_plan(self.spec, alloc, self._inputs(1, None, checked))

    def place(self, attempt: int) -> tuple[Preflight, Allocation]:
        """The pre-flight and placement of ``attempt``, given the attempts so far (``results``)
        and the hosts sitting out (``rest``)."""
        checked = self._preflight(attempt)
        return checked, self._place(checked.inventory)

    # ------------------------------------------------------------------ the steps

    def _preflight(self, attempt: int) -> Preflight:
        """Candidate hosts (selection, cooldowns), checked by the gate for this attempt's need:
        -np first, then the restart's floor (--min-np, or the first attempt's size)."""
        selected = select(self.inventory, self.spec.allocation)  # --include/--exclude/--slots
        chosen = choose(selected, self.rest, time.monotonic(), self._floor())
        if chosen.kept_suspects:
            self.reporter.note(
                f"keeping {', '.join(chosen.kept_suspects)}: a rank there was killed by a "
                "signal, but without it too few slots remain"
            )
        candidates = chosen.inventory
        # say what cannot fit before any SSH: -np and --min-hosts, or a restart's floor
        if attempt == 1:
            allocate(candidates, self.spec.np, policy=placement_only(self.spec.allocation))
        else:
            check_floor(candidates.total_slots, self._floor(), chosen.left_out,
                        bool(self.spec.restart.min_np))
        need = self._floor() if self.results else self.spec.np
        handed, self._handed = self._handed, None
        if handed is not None and attempt == 1:  # the ring check's probe, less its exclusions
            kept = {h.name for h in candidates.hosts}
            return replace(handed, inventory=replace(handed.inventory, hosts=tuple(
                h for h in handed.inventory.hosts if h.name in kept)))
        return run_gate(self.spec, candidates, need, self.remote, self.reporter)

    def _floor(self) -> int | None:
        """The fewest ranks a restart may run: --min-np, else the first attempt's size."""
        return self.spec.restart.min_np or self._first_np

    def _place(self, inventory: Inventory) -> Allocation:
        inventory = without_spares(inventory, self.spec.elastic)  # --elastic --spares N
        want, floor = self.spec.np, self._floor()
        if self.results and floor is not None and inventory.total_slots < (want or floor):
            check_floor(inventory.total_slots, floor, self.rest.ever_excluded,
                        bool(self.spec.restart.min_np))
            want = inventory.total_slots
        alloc = allocate(inventory, want, policy=placement_only(self.spec.allocation))
        if self._first_np is None:
            self._first_np = alloc.np
        # tf-ps: the chief and the ps tasks too (--ps-hosts own: on hosts without workers)
        alloc = tfcluster.with_tasks(alloc, self.spec, inventory.hosts)
        if tfcluster.is_tf(self.spec) and self.spec.preflight.enabled:
            ports = tfcluster.ports_by_host(alloc, self.spec)
            for host in check_ports(self.remote, alloc.hosts, ports, self.spec.tf_port,
                                    self._python):
                self.reporter.note(f"warning: could not check the TF task ports on {host}")
        return alloc

    def _attempt(self, attempt: int, alloc: Allocation, checked: Preflight) -> JobResult:
        world = elastic_world(alloc, self.spec.elastic)
        hubs = hubs_for(self.spec.supervision.control_hubs, world or alloc.np)
        control = ControlServer(bind=checked.control_host, ranks=alloc.np, per_host=alloc.busiest,
                                elastic_world=world,  # a hub a host (under --elastic: any)
                                connections=len(alloc.hosts) if hubs and not world else None)
        self._live = (None, control)
        delivery: Delivery | None = None
        try:
            plan = make_plan(self.spec, alloc, self._inputs(attempt, control, checked))
            self.reporter.note(f"attempt {attempt}: {alloc.np} ranks on {len(alloc.hosts)} "
                               f"host(s); logs in {plan.attempt_dir}")
            for line in plan.mca_notes if attempt == 1 else ():  # --mpi-arg, OMPI_MCA_*
                self.reporter.note(line)
            job, delivery = start_with_secrets(self.remote, plan, self._python, self.reporter.line,
                                               self.env.environ, self.open_run_dir())
            self._live = (job, control)
            self._marks = Milestones(started=time.time())
            if self._stopped is not None:  # a signal arrived while starting
                job.request_stop(self.spec.supervision.teardown_grace, signum=self._stopped)
            straggler = StragglerWatch(self.spec.supervision.straggler, rank_hosts(alloc))
            self._elastic = ElasticWatch(
                rank_hosts(alloc), self.spec.supervision.heartbeat_timeout, job.started,
                keeper_for(self.spec, checked.inventory, plan, self.open_run_dir(), self.remote,
                           self.reporter.note, self._python),
                control.abort_ring, job.cut_host) if self.spec.elastic else None
            fault = self._supervise(job, control, plan, straggler)
            detected_at = time.time()
            result = job.wait()
            self._live = (None, control)
            teardown = self._tear_down(plan, control, fault)
            job.finish()
            log.info("hosts reaped %.2f s after detection", time.time() - detected_at)
            tails = {r: tuple(t) for r, t in job.tails().items() if r is not None}
            snap = control.snapshot()
            merged = merge(
                result,
                fault,
                teardown,
                attempt,
                Ending(
                    detected_at, time.time(), tails,
                    seen_hosts(alloc, snap, self._elastic is not None),
                    finished=live_done(snap) if self._elastic else all_done(snap, alloc),
                    never_started=() if self._elastic else never_started(snap, alloc, tails),
                ),
            )
            warnings = usage_warnings(
                snap, alloc, self.spec.supervision, self.spec.checkpoint is not None,
                horovod=(self.spec.strategy is Strategy.HOROVOD
                         and self.spec.supervision.expect_hvd_init),
            )
            for text in (*merged.warnings, *warnings):
                self.reporter.note(f"warning: {text}")
            root = merged.failure.root if merged.failure is not None else None
            task = tfcluster.task_name(alloc, self.spec, root.rank) if root is not None else None
            if root is not None and task is not None:
                self.reporter.note(f"rank {root.rank} is TensorFlow task {task}")
            return replace(
                merged, warnings=merged.warnings + warnings, stragglers=straggler.found,
                failed_task=task, milestones=self._marks, doctor=checked.doctor,
                absorbed=tuple(self._elastic.incidents) if self._elastic else (),
            )
        finally:
            control.close()
            self._live = None
            if delivery is not None:  # the reapers removed it everywhere; this is ours
                delivery.remove_local()

    def _supervise(
        self, job: Job, control: ControlServer, plan: LaunchPlan, straggler: StragglerWatch
    ) -> Fault | None:
        alloc = plan.allocation
        watchers: list[Watcher] = []  # each ticked in turn after the pure checks
        if tfcluster.has_servers(self.spec):
            watchers.append(ServerFinisher(control.broadcast))
        if self._elastic is not None:
            watchers.append(self._elastic)
        if straggler.policy.action is not StragglerAction.OFF:
            watchers.append(straggler)
        fault = wait_or_fault(job.ended, control, alloc, self.spec.supervision, job.started,
                              lambda snap: self._tick(snap, alloc), watchers,
                              self.reporter.note, elastic=self._elastic is not None)
        if fault is not None:
            self.reporter.note(f"{fault.message}; tearing the job down")
            control.broadcast("stop")
            # The ranks were just told to end themselves and their daemons; mpirun, which may
            # be waiting on a daemon it lost, gets a short grace before SIGKILL.
            job.request_stop(FAULT_GRACE_S, by_user=False)
        return fault

    def _tick(self, snap: Snapshot, alloc: Allocation) -> None:
        self._marks = observe(self._marks, snap, alloc.np, time.time())  # the ledger's times
        self.reporter.tick(snap, alloc)

    def _tear_down(self, plan: LaunchPlan, control: ControlServer,
                   fault: Fault | None) -> tuple[HostTeardown, ...]:
        """Reaper on every host, spares too (not the ones known lost: they cannot answer) and
        here, where mpirun's ssh clients ran (they may leave mpirun's process group)."""
        lost = set(fault.hosts) if fault and fault.kind is FailureKind.HOST_LOST else set()
        alloc = plan.allocation
        spares = self._elastic.spare_hosts(alloc.hosts) if self._elastic is not None else ()
        reachable = replace(alloc, hosts=tuple(h for h in (*alloc.hosts, *spares)
                                               if h.name not in lost))
        rows = reap_hosts(self.remote, reachable, self._python, plan.run_id, control.snapshot())
        skipped = tuple(HostTeardown(h, 0, (), "not verified: host lost; its ranks end themselves "
                                     "and their daemon once they stop hearing from ringtrain")
                        for h in sorted(lost))
        local: tuple[HostTeardown, ...] = ()
        if not alloc.is_local_only:
            local = (local_teardown("(launcher)", plan.run_id, {}),)
        return rows + skipped + local

    # ------------------------------------------------------------------ helpers

    def _recheck(self, alloc: Allocation, checked: Preflight) -> None:
        """The failed attempt's hosts not resting or busy before it: free GPUs, or sit out."""
        spec, now = self.spec, time.monotonic()
        hosts = [h for h in alloc.hosts if h.name not in checked.busy | self.rest.resting(now)]
        if not hosts or not spec.restart.recheck_timeout_s or not spec.preflight.enabled or (
                spec.preflight.gpus is GpuRule.IGNORED):
            return
        found = recheck(self.remote, hosts, spec.restart.recheck_timeout_s, self.reporter.note,
                        stopped=lambda: self._stopped is not None)
        self.results[-1] = replace(self.results[-1], recheck=found)
        left = tuple(h for h, _ in found.left_out)
        self.rest = self.rest.excluding(left, time.monotonic(), spec.restart.cooldown_s)
        self._write_summary()  # the re-check is on record before the next attempt starts

    def _no_restart(self, err: RingtrainError) -> JobResult:
        """A restart that cannot be placed: the failed attempt's report still counts."""
        reason = f"no restart: {err.message}; {err.hint}"
        self.reporter.note(reason)
        last = self.results[-1]
        self.results[-1] = replace(last, decision=f"{last.decision}; {reason}")
        return self._write_summary(stop_reason=reason)

    def _inputs(
        self, attempt: int, control: ControlServer | None, checked: Preflight
    ) -> PlanInputs:
        return PlanInputs(
            self.env,
            tcp_include=checked.tcp_include,
            extra_env=checked.env,
            attempt=attempt,
            reach=self._run_dir.reach if control is not None and self._run_dir else None,
            control_addr=control.address if control else None,
            control_token=control.token if control else None,
            launcher_timeout=self.spec.supervision.launcher_timeout,
            elastic_hosts=tuple((h.name, h.slots) for h in without_spares(
                checked.inventory, self.spec.elastic).hosts),
        )

    @property
    def _python(self) -> str:
        """The Python the ranks run, as make_plan picks it (the reaper runs with it too)."""
        return self.spec.python or self.env.python

    def _write_summary(self, stop_reason: str | None = None) -> JobResult:
        """The run so far on its last attempt's result (what run() returns), as result.json."""
        final = replace(
            self.results[-1],
            earlier=tuple(self.results[:-1]),
            max_restarts=self.spec.restart.max_restarts,
            np_asked=self.spec.np,
            stop_reason=stop_reason,
            wall_s=time.monotonic() - self._started,
        )
        try:
            self.open_run_dir().write("result.json", json.dumps(final.run_json(), indent=2))
        except OSError as err:  # the run dir deleted, the disk full: the run still reports
            self.reporter.note(f"warning: cannot write result.json in {self.run_dir}: {err}")
        return final
