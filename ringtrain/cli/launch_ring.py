"""``launch --ring-check``: before the job, the ring check over the hosts the pre-flight passed;
``--on-slow-host exclude`` leaves a slow host out (added to the spec's --exclude, so plan.json
and ``launch --from`` show it), ``warn`` keeps it and says so."""

from __future__ import annotations

from dataclasses import replace

import click

from ringtrain.cli.ring_view import RingReporter, show_ring_check
from ringtrain.hostfile import Inventory
from ringtrain.launch.gate import run_gate
from ringtrain.remote import Remote
from ringtrain.ringcheck.outliers import rate
from ringtrain.ringcheck.runner import RingCheckOptions, run_ring_check
from ringtrain.spec import LaunchSpec


def ring_precheck(spec: LaunchSpec, inventory: Inventory, remote: Remote) -> LaunchSpec:
    reporter = RingReporter()
    gate = run_gate(spec, inventory, spec.np, remote, reporter)
    pre = spec.preflight
    opts = RingCheckOptions(
        runs_dir=spec.runs_dir, working_dir=spec.working_dir, ssh=spec.ssh, python=spec.python,
        network_interface=spec.network_interface, expect_Bps=pre.expect_link_Bps,
        slow_ratio=pre.slow_ratio,
    )
    check = run_ring_check(gate.inventory, remote, opts, reporter)
    show_ring_check(check, stderr=True)
    slow = check.verdict.slow_hosts
    if not slow:
        return spec
    numbers = ", ".join(f"{s.host} {rate(s.median_Bps)}" for s in check.verdict.scores if s.slow)
    if pre.on_slow_host == "exclude":
        click.echo(f"ringtrain: ring check: excluding {', '.join(slow)} (median pair: "
                   f"{numbers}; reference {rate(check.verdict.reference_Bps)})", err=True)
        exclude = (*spec.allocation.exclude, *slow)
        return replace(spec, allocation=replace(spec.allocation, exclude=exclude))
    click.echo(f"ringtrain: ring check: warning: keeping slow host(s) {numbers} "
               "(--on-slow-host warn); the ring runs at its slowest link", err=True)
    return spec
