"""``launch --ring-check``: before the job, the ring check over the hosts the pre-flight passed;
``--on-slow-host exclude`` leaves a slow host out (added to the spec's --exclude, so plan.json
and ``launch --from`` show it), ``warn`` keeps it and says so. Everything it has to say goes
through the launch's Reporter: its notes, its pre-flight table and, for a reporter that draws
it (``ring_check(check)``), the ring check's own table."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, runtime_checkable

from ringtrain.hostfile import Allocation, Inventory, select
from ringtrain.launch.job.run import OutputLine
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.reporter import Reporter
from ringtrain.probe.gate import Preflight, run_gate
from ringtrain.probe.probe_parse import ProbeReport
from ringtrain.probe.verdict import PreflightPolicy, PreflightVerdict
from ringtrain.remote import Remote
from ringtrain.ringcheck.outliers import rate
from ringtrain.ringcheck.runner import RingCheck, RingCheckOptions, run_ring_check
from ringtrain.spec import LaunchSpec


@runtime_checkable
class RingCheckDrawer(Protocol):
    """A Reporter that also draws the ring check's table (the CLI's views do)."""

    def ring_check(self, check: RingCheck) -> None: ...


class RingCheckNotes:
    """The ring check's own job speaks through the launch's reporter: its notes prefixed
    ``ring check:``, its pre-flight table as is; its ranks' output stays in its logs."""

    def __init__(self, outer: Reporter) -> None:
        self.outer = outer

    def note(self, text: str) -> None:
        if "--no-probe" in text:  # the hosts were probed just before; the ring job skips it
            return
        self.outer.note(f"ring check: {text}")

    def line(self, line: OutputLine) -> None:
        pass

    def tick(self, snap: Snapshot, alloc: Allocation) -> None:
        pass

    def verdict(self, inventory: Inventory, report: ProbeReport, verdict: PreflightVerdict,
                policy: PreflightPolicy) -> None:
        self.outer.verdict(inventory, report, verdict, policy)


def ring_precheck(
    spec: LaunchSpec, inventory: Inventory, remote: Remote, reporter: Reporter
) -> tuple[LaunchSpec, Preflight]:
    """The spec to launch after the ring check (unchanged, or with the slow hosts excluded)
    and the pre-flight it ran, over the hosts the first attempt would probe: the Session
    takes it for that attempt instead of probing again."""
    notes = RingCheckNotes(reporter)
    gate = run_gate(spec, select(inventory, spec.allocation), spec.np, remote, notes)
    pre = spec.preflight
    opts = RingCheckOptions(
        runs_dir=spec.runs_dir, trust_groups=spec.trust_groups,
        ssh=spec.ssh, python=spec.python,
        network_interface=spec.network_interface, expect_Bps=pre.expect_link_Bps,
        slow_ratio=pre.slow_ratio,
    )
    check = run_ring_check(gate.inventory, remote, opts, notes)
    if isinstance(reporter, RingCheckDrawer):
        reporter.ring_check(check)
    slow = check.verdict.slow_hosts
    if not slow:
        reporter.note("ring check: no slow host or link")
        return spec, gate
    numbers = ", ".join(f"{s.host} {rate(s.median_Bps)}" for s in check.verdict.scores if s.slow)
    if pre.on_slow_host == "exclude":
        reporter.note(f"ring check: excluding {', '.join(slow)} (median pair: {numbers}; "
                      f"reference {rate(check.verdict.reference_Bps)})")
        exclude = (*spec.allocation.exclude, *slow)
        return replace(spec, allocation=replace(spec.allocation, exclude=exclude)), gate
    reporter.note(f"ring check: warning: keeping slow host(s) {numbers} "
                  "(--on-slow-host warn); the ring runs at its slowest link")
    return spec, gate
