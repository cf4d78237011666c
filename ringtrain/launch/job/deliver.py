"""The secrets file of a job, on every host before the job starts (mpirun and horovodrun).

make_plan kept the secret values out of the launcher command's environment (horovodrun would
write them into every rank's command line, Open MPI ship them to every host in clear:
launch/plan/secretvars.py) and put them in ``Command.secrets``, with the file's path, the same
string on every host, in ``RINGTRAIN_ENV_FILE``. ``deliver`` writes that file: on this machine
directly (``rank/secretfile.store``), on every other host through the Remote seam as
``python -I -m ringtrain.rank.secretfile --store PATH``, the values on the command's stdin. A host
where it cannot be written stops the launch before any rank starts (LaunchError naming every
such host), and the files already written are taken back. After the job the reaper removes the
run's files on every host; the launcher removes its own (``Delivery.remove_local``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from ringtrain.errors import LaunchError
from ringtrain.hostfile import Host
from ringtrain.launch.job import run
from ringtrain.launch.job.run import Job, LineSink
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.plan.make import LaunchPlan
from ringtrain.rank import envvars, isolated, secretfile
from ringtrain.remote import CmdResult, InputRemote, Remote

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a secrets file was written: its path, on this machine or not, and other hosts."""

    path: str
    local: bool
    hosts: tuple[Host, ...] = ()

    def remove_local(self) -> None:
        if self.local:
            secretfile.remove(self.path)


def secretfile_argv(python: str, action: str, path: str) -> tuple[str, ...]:
    return isolated.module_argv(python, "ringtrain.rank.secretfile", f"--{action}", path)


def deliver(remote: Remote, plan: LaunchPlan, python: str,
            timeout: float = TIMEOUT_S) -> Delivery | None:
    """Write the plan's secrets file on every host of its allocation; None when the plan
    sends no secrets by file (srun, or no secret at all)."""
    if not plan.command.secrets:
        return None
    path = dict(plan.command.env)[envvars.ENV_FILE]
    data = secretfile.encode(dict(plan.command.secrets))
    local = [h for h in plan.allocation.hosts if h.is_local]
    others = tuple(h for h in plan.allocation.hosts if not h.is_local)
    failed: dict[str, str] = {}
    if local:
        try:
            secretfile.store(path, data)
        except secretfile.SecretFileError as err:
            failed.update({h.name: str(err) for h in local})
    if others and isinstance(remote, InputRemote):
        answers = remote.run_with_input(others, secretfile_argv(python, "store", path), data,
                                        timeout)
        failed.update({host: _why(res) for host, res in answers.failed.items()})
        failed.update({h.name: _why(None) for h in others if h.name not in answers})
    elif others:
        failed.update({h.name: "this Remote cannot pass data on stdin" for h in others})
    done = Delivery(path, bool(local) and local[0].name not in failed,
                    tuple(h for h in others if h.name not in failed))
    if failed:
        withdraw(remote, done, python)
        raise LaunchError(
            f"cannot write the secrets file {path} on {', '.join(failed)}, so the job was not "
            "started: " + "; ".join(f"{host}: {why}" for host, why in failed.items()),
            f"{plan.backend.value} would show secret values in ps or send them in clear, so "
            "ringtrain passes them in this file: make the home directory there writable by you "
            "(~/.ringtrain/secrets must be your own directory, not a link)",
        )
    return done


def withdraw(remote: Remote, delivery: Delivery | None, python: str,
             timeout: float = TIMEOUT_S) -> None:
    """Remove a delivered secrets file everywhere it went (the job did not start)."""
    if delivery is None:
        return
    delivery.remove_local()
    if delivery.hosts:
        answers = remote.run(delivery.hosts, secretfile_argv(python, "remove", delivery.path),
                             timeout)
        for host, res in answers.failed.items():
            log.warning("could not remove %s on %s: %s", delivery.path, host, _why(res))


def _why(res: CmdResult | None) -> str:
    if res is None:
        return "no answer"
    lines = res.stderr.strip().splitlines()
    said = lines[-1].removeprefix("secretfile: ") if lines else ""
    return res.error or said or f"exit code {res.exit_code}"


def start_with_secrets(remote: Remote, plan: LaunchPlan, python: str, sink: LineSink,
                       environ: Mapping[str, str], run_dir: RunDir) -> tuple[Job, Delivery | None]:
    """Deliver the plan's secrets file (if it has one), then ``run.start`` with the environment
    the plan was made from (the secrets it unsets are those it saw); a start that fails takes
    the file back from every host."""
    delivery = deliver(remote, plan, python)
    try:
        return run.start(plan, sink, run_dir, environ), delivery
    except BaseException:
        withdraw(remote, delivery, python)
        raise
