"""``ringtrain check``: probe every host (one SSH round trip each) and say whether a launch would
go ahead. One table row per host; exit 0 when it would, 4 (ProbeError) when it would be refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ringtrain.assembly.launch_spec import ssh_transport as checked_transport
from ringtrain.cli import jsonout, ring_view
from ringtrain.cli.context import SshOptions, cli_context
from ringtrain.cli.defaults import with_layers
from ringtrain.cli.options import (
    host_source_options,
    on_bad_host_option,
    placement_options,
    ring_check_options,
    ssh_options,
)
from ringtrain.cli.verdict_view import (
    doctor_to_dict,
    print_doctor,
    print_verdict,
    verdict_to_dict,
)
from ringtrain.errors import RingtrainError
from ringtrain.hostfile import AllocationPolicy, Host, Inventory, allocate, resolve_hosts
from ringtrain.hostfile.allocate import placement_only, select
from ringtrain.launch.job.hosts import mark_this_machine, with_ssh_defaults
from ringtrain.probe.doctor import CHECKS
from ringtrain.probe.doctor_policy import parse_on_bad_host
from ringtrain.probe.gate import evaluate_remembering, gpu_rule
from ringtrain.probe.hostprobe import probe
from ringtrain.probe.verdict import PreflightPolicy
from ringtrain.remote import LocalRemote, Remote
from ringtrain.spec import GpuRule, SshSpec

_EPILOG = """\b
Examples:
  ringtrain check --hosts hosts/cluster.yaml
  ringtrain check -H gpu01:4,gpu02:4 --ssh-config ~/.ssh/cluster_config -np 8
  ringtrain check --hosts gpu.txt --on-bad-host exclude --min-hosts 3 --json
  ringtrain check -H localhost:2 --cpu
  ringtrain check --hosts gpu.txt --doctor
  ringtrain check --hosts gpu.txt --on-bad-host exclude --on-bad-host pcie-width=exclude

Exit code: 0 when a launch would go ahead (warnings allowed), 4 when it would be refused,
2 for bad flags or host files.
"""


@click.command("check", epilog=_EPILOG)
@host_source_options("Inventory file (any format); --hostfile as horovodrun spells it.")
@click.option("-np", "--np", "--num-proc", "np", type=click.IntRange(min=1),
              help="Ranks the launch would ask.")
@ssh_options()
@on_bad_host_option
@click.option("--doctor", is_flag=True,
              help="Show the GPU and NIC doctor's findings alone: one row per finding, with "
              "its reason code, the value measured, the one expected and the fix. Codes: "
              + "; ".join(f"{c.code} ({c.severity}): {c.what}" for c in CHECKS) + ".")
@placement_options()
@click.option("--on-busy", type=click.Choice(["warn", "exclude"]), default="warn",
              show_default=True, help="What a GPU already in use does to its host.")
@click.option("--busy-memory-mib", type=click.IntRange(min=0), default=1024, show_default=True)
@click.option("--busy-util", type=click.IntRange(0, 100), default=10, show_default=True,
              help="GPU utilization (%) above which a GPU counts as busy.")
@click.option("--gpus", "gpu_mode", flag_value="required",
              help="Require GPUs (default, as launch: required unless no host has an NVIDIA "
              "driver).")
@click.option("--cpu", "gpu_mode", flag_value="ignored",
              help="CPU-only job: GPUs and nvidia-smi do not matter.")
@click.option("--allow-mixed-versions", is_flag=True,
              help="Warn instead of refusing when software versions differ across hosts.")
@click.option("--python", help="Python on the hosts (default: this one, same path everywhere).")
@click.option("--network-interface", help="Interface names or CIDRs for MPI/NCCL traffic.")
@click.option("--timeout", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Seconds per host for the whole probe.")
@click.option("--connect-timeout", type=click.FloatRange(min=1), default=5.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=64, show_default=True,
              help="Hosts probed at once.")
@ring_check_options("--ring")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True, help="Where the ring check's run (logs, measurements) goes.")
@click.option("--trust-group", "trust_groups", multiple=True, metavar="GROUP",
              help="A group trusted to write the runs directory or one above it (as launch's).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.pass_context
def command(
    ctx: click.Context,
    hosts_file: str | None, host_spec: str | None, hosts_format: str | None, np: int | None,
    ssh_config: Path | None, known_hosts: Path | None, ssh_port: int | None,
    ssh_identity_file: str | None, accept_new_host_keys: bool,
    ssh_transport: str, on_bad_host: tuple[str, ...], doctor: bool, min_hosts: int,
    include: tuple[str, ...], exclude: tuple[str, ...], slots: tuple[tuple[str, int], ...],
    ring_label: str | None,
    on_busy: str, busy_memory_mib: int, busy_util: int,
    gpu_mode: str | None, allow_mixed_versions: bool, python: str | None,
    network_interface: str | None,
    timeout: float, connect_timeout: float, concurrency: int, ring_check: bool,
    expect_link: str | None, slow_ratio: float, on_slow_host: str, runs_dir: Path,
    trust_groups: tuple[str, ...], as_json: bool,
) -> None:
    """Probe every host over SSH: GPUs, software versions, network; report what a launch would do.

    Every host is tried; the table shows all of them, then why a launch would be refused.
    """
    def note(text: str) -> None:
        click.echo(f"ringtrain: {text}", err=True)

    hosts = with_layers(ctx, {"hosts_file": hosts_file, "host_spec": host_spec,
                              "hosts_format": hosts_format, "ssh_config": ssh_config})
    ssh = SshSpec(ssh_config, known_hosts, accept_new_host_keys, ssh_port, ssh_identity_file,
                  transport=checked_transport(ssh_transport))
    placement = AllocationPolicy(include=include, exclude=exclude, slot_overrides=slots,
                                 min_hosts=min_hosts, ring_label=ring_label)
    found = resolve_hosts(hosts["hosts_file"], hosts["host_spec"], hosts["hosts_format"],
                          note=note)
    inventory = with_ssh_defaults(mark_this_machine(
        select(found, placement) if found is not None  # --include/--exclude/--slots, as launch
        else Inventory((Host("localhost", 1),), source="localhost", format="local")), ssh)
    bad = parse_on_bad_host(on_bad_host)
    policy = PreflightPolicy(
        on_bad_host=bad.general, doctor_actions=bad.per_code,
        min_hosts=min_hosts, np=np, busy_memory_mib=busy_memory_mib, busy_util_pct=busy_util,
        on_busy="exclude" if on_busy == "exclude" else "warn",
        require_same_versions=not allow_mixed_versions, network_interface=network_interface)
    remote: Remote
    if inventory.is_local_only:
        remote = LocalRemote()
    else:
        remote = cli_context().remote_factory(SshOptions(ssh, connect_timeout, concurrency))
    report = probe(inventory, remote, python=python, timeout=timeout)

    policy = gpu_rule(GpuRule(gpu_mode or "auto"), report, policy, note)
    verdict = evaluate_remembering(inventory, report, policy)
    data = verdict_to_dict(inventory, report, verdict)
    if doctor:
        data = doctor_to_dict(verdict)
        if not as_json:
            print_doctor(inventory, verdict)
    elif not as_json:
        print_verdict(inventory, report, verdict, policy)
    err: RingtrainError | None = verdict.error()
    if err is None:  # where a launch would place -np ranks (--ring-label), or why it cannot
        allocate(verdict.apply(inventory), np, policy=placement_only(placement))
    if err is None and ring_check:
        from ringtrain.ringcheck.outliers import parse_link_rate  # noqa: PLC0415
        from ringtrain.ringcheck.runner import RingCheckOptions, run_ring_check  # noqa: PLC0415

        opts = RingCheckOptions(
            runs_dir=runs_dir, trust_groups=trust_groups,
            ssh=ssh, python=python,
            network_interface=network_interface, slow_ratio=slow_ratio,
            expect_Bps=parse_link_rate(expect_link) if expect_link else None)
        check = run_ring_check(verdict.apply(inventory), remote, opts,
                               ring_view.RingReporter())
        ring_view.show_ring_check(check, stderr=as_json)
        data["ring"] = {**check.verdict.to_json(), "run_dir": str(check.run_dir),
                        "gpu_to_gpu": check.intra}
        if check.verdict.slow_hosts:
            what = ("a launch with --on-slow-host exclude leaves out" if on_slow_host == "exclude"
                    else "warning: slow host(s), a launch keeps them (--on-slow-host warn):")
            click.echo(f"ringtrain: ring check: {what} {', '.join(check.verdict.slow_hosts)}",
                       err=True)
    if as_json:
        jsonout.echo(json.dumps(data, indent=2))
    if err is not None:
        raise err
