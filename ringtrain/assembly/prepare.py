"""The assembly of a launch, one function for both doors (``ringtrain launch`` and
``ringtrain.run()``), after torchelastic's ``elastic_launch``: whatever parsed the request,
the same steps turn its LaunchSpec into the Session that runs it.

    LaunchSpec -> entry resolved -> hosts (inventory, else the Slurm/PBS allocation, else
    this machine) and the scheduler's backend -> srun refused outside an allocation ->
    Remote -> ring pre-check (--ring-check) -> Session

Nothing here prints: notes, the pre-flight tables and the ring check go to the Reporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ringtrain.assembly.entry_kind import resolve_entry
from ringtrain.assembly.remotes import RemoteFactory, SshOptions, ssh_remote
from ringtrain.assembly.ring_gate import ring_precheck
from ringtrain.errors import UsageError
from ringtrain.launch.job import hosts as launch_hosts
from ringtrain.launch.job import run
from ringtrain.launch.plan.make import LaunchPlan
from ringtrain.launch.reporter import Reporter
from ringtrain.launch.session import Session
from ringtrain.remote import Remote
from ringtrain.slurm_options import check_srun_args
from ringtrain.spec import Backend, LaunchSpec


def prepare(
    spec: LaunchSpec,
    reporter: Reporter,
    environ: Mapping[str, str],
    *,
    remote: Remote | None = None,
    remote_factory: RemoteFactory = ssh_remote,
    dry_run: bool = False,
) -> Session:
    """The Session that runs ``spec``. ``remote`` (a caller's own) wins over the one an
    allocation needs (srun steps inside Slurm), which wins over ``remote_factory``'s SSH.
    A dry run starts nothing: no ring check, and ``--backend srun`` may be planned anywhere."""
    spec = resolve_entry(spec)
    if spec.horovod.output_filename:
        reporter.note(
            f"--output-filename {spec.horovod.output_filename}: every rank's output is in "
            f"{spec.runs_dir}/<run id>/attempt-N/rank.<N>.log (stdout and stderr, as the rank "
            "wrote them); nothing is written there")
    found = launch_hosts.resolve(spec, environ)
    for note in found.notes:
        reporter.note(note)
    if spec.backend is None and found.scheduler is not None:
        spec = replace(spec, backend=found.scheduler.default_backend)
    if spec.launcher is not Backend.SRUN:  # no scheduler chose srun: --srun-args has none
        check_srun_args(spec.srun_args, spec.launcher.value)
    if spec.launcher is Backend.SRUN and "SLURM_JOB_ID" not in environ and not dry_run:
        raise UsageError(
            "--backend srun needs a Slurm allocation",
            "run inside sbatch/salloc (see `ringtrain slurm render`), or use --backend mpirun",
        )
    remote = remote or found.remote or remote_factory(SshOptions(spec.ssh))
    if spec.preflight.ring_check and not dry_run:  # its pre-flight is the first attempt's
        spec, checked = ring_precheck(spec, found.inventory, remote, reporter)
        return Session(spec, found.inventory, remote, reporter, preflight=checked)
    return Session(spec, found.inventory, remote, reporter)


def write_plan(session: Session) -> LaunchPlan:
    """The dry run: the plan attempt 1 would run (same pre-flight, unless --no-probe, same
    placement and network settings), written to its run directory (hostfile, plan.json) so
    the printed command runs as is. Starts nothing."""
    plan = session.dry_plan()
    run.prepare(plan, session.open_run_dir())
    return plan
