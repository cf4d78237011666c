"""A launch session: attempts of one job, each supervised and torn down, restarted on request.

For every attempt: resolve the usable hosts (the preflight hook re-probes them; hosts that failed
an earlier attempt sit out a cooldown), allocate, start a control server, plan, run, supervise,
tear down on every host and verify, then ``decide()`` (pure) whether to go again. A restarted
job resumes from its newest committed checkpoint: the training script finds it through
``RINGTRAIN_CHECKPOINT_URL`` or ``$RINGTRAIN_RUN_DIR/checkpoints``, which stay the same across
attempts.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringtrain.errors import AllocationError, RingtrainError
from ringtrain.hostfile import Allocation, Inventory, allocate, placement_only, select
from ringtrain.launch import run
from ringtrain.launch.control import ControlServer, Snapshot
from ringtrain.launch.plan import LaunchPlan, PlanInputs, make_plan
from ringtrain.launch.remote import Remote
from ringtrain.launch.result import HostTeardown, JobResult, JobState
from ringtrain.launch.supervise import (
    Fault,
    FaultKind,
    SupervisionPolicy,
    local_teardown,
    reap_hosts,
    wait_or_fault,
)
from ringtrain.request import LaunchRequest

log = logging.getLogger(__name__)
FAULT_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    max_restarts: int = 0
    min_np: int | None = None
    cooldown_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Decision:
    restart: bool
    reason: str
    exclude: tuple[str, ...] = ()


def decide(result: JobResult, attempt: int, policy: RestartPolicy) -> Decision:
    """Whether to restart after ``result``, and which hosts to leave out. Pure."""
    if result.state is JobState.SUCCEEDED:
        return Decision(False, "succeeded")
    if result.state is JobState.INTERRUPTED:
        return Decision(False, "stopped by the user")
    exclude: tuple[str, ...] = ()
    if result.fault_kind in (FaultKind.HOST_LOST.value, FaultKind.START_TIMEOUT.value):
        exclude = result.fault_hosts
    elif (
        result.fault_kind is None
        and result.signal_name is not None
        and result.failed_host is not None
    ):
        # killed by something other than ringtrain (OOM killer, hardware): suspect the host;
        # after a fault ringtrain detected, the signals are its own teardown's
        exclude = (result.failed_host,)
    if attempt > policy.max_restarts:
        spent = f"restart budget spent ({policy.max_restarts} of {policy.max_restarts})"
        return Decision(
            False, spent if policy.max_restarts else "no restarts asked (--max-restarts)"
        )
    why = f"restarting: attempt {attempt + 1} of {policy.max_restarts + 1}"
    if exclude:
        why += f", without {', '.join(exclude)} for a cooldown"
    return Decision(True, why, exclude)


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the pre-flight check decided for one attempt: the usable hosts, the network for MPI
    traffic (``tcp_include``, extra variables such as NCCL_SOCKET_IFNAME) and the address of
    this machine that every host can reach (the control server binds there)."""

    inventory: Inventory
    tcp_include: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    control_host: str | None = None


@dataclass
class Hooks:
    """How the session talks to the outside: all optional."""

    sink: run.LineSink = lambda line: None
    on_tick: Callable[[Snapshot, Allocation], None] | None = None
    notify: Callable[[str], None] = lambda text: None
    # (inventory, slots the attempt needs: -np, or --min-np on a restart) -> usable hosts
    preflight: Callable[[Inventory, int | None], Preflight] = lambda inv, _need: Preflight(inv)


@dataclass(frozen=True, slots=True)
class SessionEnv:
    run_id: str
    environ: dict[str, str]
    is_root: bool
    python: str
    control_bind: str = "127.0.0.1"
    tcp_include: str | None = None


class Session:
    def __init__(
        self,
        request: LaunchRequest,
        inventory: Inventory,
        remote: Remote,
        env: SessionEnv,
        supervision: SupervisionPolicy,
        restart: RestartPolicy,
        hooks: Hooks,
    ) -> None:
        self.request, self.inventory, self.remote, self.env = request, inventory, remote, env
        self.supervision, self.restart, self.hooks = supervision, restart, hooks
        self.results: list[JobResult] = []
        self.last_checkpoint: dict[str, Any] | None = None
        self.stop_reason: str | None = None
        self._cooldown: dict[str, float] = {}
        self._job: run.Job | None = None
        self._control: ControlServer | None = None
        self._stopped: int | None = None
        self._first_np: int | None = None

    @property
    def run_dir(self) -> Path:
        return (self.request.runs_dir / self.env.run_id).absolute()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop the whole job now (from a signal handler): no restart follows."""
        self._stopped = signum
        if self._control is not None:
            self._control.broadcast("stop")
        if self._job is not None:
            self._job.request_stop(self.supervision.teardown_grace, signum=signum)

    def run(self) -> JobResult:
        attempt = 1
        while True:
            try:
                result = self._attempt(attempt)
            except RingtrainError as err:  # AllocationError, PreflightRefused, ...
                if not self.results:
                    raise  # nothing ran: the CLI reports it as a usage error
                # a restart that cannot be placed: the failed attempt's report still counts
                self.stop_reason = f"no restart: {err.message}; {err.hint}"
                self.hooks.notify(self.stop_reason)
                self._write_summary()
                return self.results[-1]
            self.results.append(result)
            self._write_summary()
            decision = decide(result, attempt, self.restart)
            if not decision.restart or self._stopped is not None:
                return result
            now = time.monotonic()
            for host in decision.exclude:
                self._cooldown[host] = now + self.restart.cooldown_s
            ckpt = self.last_checkpoint
            resume = (
                f" from step {ckpt['step']} (epoch {ckpt['epoch']})"
                if ckpt
                else " from the start (no committed checkpoint)"
            )
            self.hooks.notify(decision.reason + resume)
            attempt += 1

    def _allocation(self) -> tuple[Allocation, Preflight]:
        now = time.monotonic()
        resting = {h for h, until in self._cooldown.items() if until > now}
        selected = select(self.inventory, self.request.allocation)  # --include/--exclude/--slots
        placement = placement_only(self.request.allocation)  # --min-hosts, --ring-label
        hosts = tuple(h for h in selected.hosts if h.name not in resting)
        if not hosts:
            raise AllocationError(
                "every host is excluded after failures", "fix the hosts and relaunch"
            )
        want = self.request.np
        # a restart may shrink down to --min-np; without it, to the size of the first attempt
        floor = (self.restart.min_np or self._first_np) if self.results else want
        if not self.results:
            # -np and --min-hosts fit: say so before any SSH
            allocate(replace(selected, hosts=hosts), want, policy=placement)
        checked = self.hooks.preflight(replace(selected, hosts=hosts), floor)
        inventory = checked.inventory
        if self.results and floor is not None and inventory.total_slots < (want or floor):
            if inventory.total_slots < floor:
                left = f" after excluding {', '.join(sorted(resting))}" if resting else ""
                raise AllocationError(
                    f"only {inventory.total_slots} slots left{left}; the restart needs {floor} "
                    f"({'--min-np' if self.restart.min_np else 'the first attempt'})",
                    "fix or replace the excluded hosts, or allow a smaller job with --min-np",
                )
            want = inventory.total_slots
        alloc = allocate(inventory, want, policy=placement)
        if self._first_np is None:
            self._first_np = alloc.np
        return alloc, checked

    def _attempt(self, attempt: int) -> JobResult:
        alloc, checked = self._allocation()
        control = ControlServer(bind=checked.control_host or self.env.control_bind)
        plan = make_plan(self.request, alloc, self._inputs(attempt, control, checked))
        self._control = control
        try:
            return self._supervise(plan, control, attempt)
        finally:
            control.close()
            self._control = None

    def dry_plan(self) -> LaunchPlan:
        """The plan attempt 1 would run, through the same pre-flight and placement, without the
        control server's address and token (a dry run starts nothing)."""
        alloc, checked = self._allocation()
        return make_plan(self.request, alloc, self._inputs(1, None, checked))

    def _inputs(
        self, attempt: int, control: ControlServer | None, checked: Preflight
    ) -> PlanInputs:
        return PlanInputs(
            run_id=self.env.run_id,
            environ=self.env.environ,
            is_root=self.env.is_root,
            python=self.env.python,
            tcp_include=checked.tcp_include or self.env.tcp_include,
            extra_env=checked.env,
            attempt=attempt,
            control_addr=control.address if control else None,
            control_token=control.token if control else None,
            launcher_timeout=self.supervision.launcher_timeout,
        )

    def _supervise(self, plan: LaunchPlan, control: ControlServer, attempt: int) -> JobResult:
        self.hooks.notify(
            f"attempt {attempt}: {plan.allocation.np} ranks on {len(plan.allocation.hosts)} "
            f"host(s); logs in {plan.attempt_dir}"
        )
        job = self._job = run.start(plan, self.hooks.sink)
        if self._stopped is not None:
            job.request_stop(self.supervision.teardown_grace, signum=self._stopped)
        tick = self.hooks.on_tick
        fault = wait_or_fault(
            job.ended,
            control,
            plan.allocation,
            self.supervision,
            job.started,
            None if tick is None else (lambda snap: tick(snap, plan.allocation)),
        )
        detected_at = time.time()
        if fault is not None:
            self.hooks.notify(f"{fault.message}; tearing the job down")
            control.broadcast("stop")
            # The ranks were just told to end themselves and their daemons; mpirun, which may
            # be waiting on a daemon it lost, gets a short grace before SIGKILL.
            job.request_stop(FAULT_GRACE_S, by_user=False)
        result = job.wait()
        log.info("job ended %.2f s after detection; reaping every host", time.time() - detected_at)
        self._job = None
        teardown = self._reap(plan, control, fault)
        job.finish()
        log.info("hosts reaped %.2f s after detection", time.time() - detected_at)
        tails = {r: tuple(t) for r, t in job.tails().items() if r is not None}
        return _merge(result, fault, teardown, attempt, detected_at, time.time(), tails)

    def _reap(
        self, plan: LaunchPlan, control: ControlServer, fault: Fault | None
    ) -> tuple[HostTeardown, ...]:
        """Reaper on every host (not the ones known lost: they cannot answer) and on this
        machine, where mpirun's ssh clients ran (they may leave mpirun's process group)."""
        lost = (
            set(fault.hosts) if fault is not None and fault.kind is FaultKind.HOST_LOST else set()
        )
        alloc = plan.allocation
        reachable = replace(alloc, hosts=tuple(h for h in alloc.hosts if h.name not in lost))
        rows = reap_hosts(
            self.remote, reachable, self._python, plan.run_id, control.snapshot()
        )
        skipped = tuple(
            HostTeardown(
                h,
                0,
                (),
                "not verified: host lost; its ranks end themselves and their "
                "daemon once they stop hearing from ringtrain",
            )
            for h in sorted(lost)
        )
        local: tuple[HostTeardown, ...] = ()
        if not alloc.is_local_only:
            local = (local_teardown("(launcher)", plan.run_id, {}),)
        return rows + skipped + local

    @property
    def _python(self) -> str:
        """The Python the ranks run, as make_plan picks it (the reaper runs with it too)."""
        return self.request.python or self.env.python

    @property
    def checkpoint_url(self) -> str:
        return self.request.checkpoint_url or str(self.run_dir / "checkpoints")

    def _find_last_checkpoint(self) -> dict[str, Any] | None:
        """The newest committed checkpoint the job's storage holds (what a restart resumes)."""
        url = self.checkpoint_url
        if "://" not in url and not (Path(url) / "manifests").is_dir():
            return None
        from ringtrain.checkpoint import list_checkpoints, open_store  # noqa: PLC0415

        try:
            listed = list_checkpoints(open_store(url))
        except RingtrainError as err:
            log.warning("cannot list checkpoints at %s: %s", url, err)
            return None
        best = next((c for c in listed if c.ok and c.manifest is not None), None)
        if best is None or best.manifest is None:
            return None
        return {"url": url, "step": best.step, "epoch": best.manifest.epoch, "name": best.name}

    def _write_summary(self) -> None:
        self.last_checkpoint = self._find_last_checkpoint()
        last = self.results[-1]
        summary: dict[str, Any] = {
            **last.to_json(),
            "run_id": self.env.run_id,
            "attempts": [r.to_json() for r in self.results],
            "np": self.request.np,
            "last_checkpoint": self.last_checkpoint,
            "stop_reason": self.stop_reason,
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.run_dir / "result.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, self.run_dir / "result.json")


def _merge(
    result: JobResult,
    fault: Fault | None,
    teardown: tuple[Any, ...],
    attempt: int,
    detected_at: float,
    torn_down_at: float,
    tails: Mapping[int, tuple[str, ...]] | None = None,
) -> JobResult:
    tails = tails or {}
    merged = replace(
        result,
        detected_at=detected_at,  # when ringtrain saw the fault, or the job's end
        teardown=teardown,
        attempt=attempt,
        torn_down_at=torn_down_at,
        teardown_s=torn_down_at - detected_at,
    )
    if fault is None:
        return merged
    failed_host = fault.hosts[0] if fault.hosts else result.failed_host
    return replace(
        merged,
        state=JobState.FAILED,
        exit_code=result.exit_code or 1,
        fault=fault.message,
        fault_kind=fault.kind.value,
        fault_hosts=fault.hosts,
        failed_host=failed_host,
        failed_rank=fault.ranks[0] if fault.ranks else result.failed_rank,
        signal_name=None,  # the signals were ringtrain's own teardown
        log_tail=tails.get(fault.ranks[0], ()) if fault.ranks else result.log_tail,
    )
