"""``ringtrain.run(...)``: launch from Python, like ``horovod.run``, and get the JobResult.

    import ringtrain
    result = ringtrain.run("train.py", "--epochs", "3", hosts="gpu01:4,gpu02:4",
                           checkpoint="s3://bucket/run1", max_restarts=2)
    if result.state.value != "succeeded":
        print(result.failure.describe(result.attempt))

The keyword arguments are the options of ``ringtrain launch`` (``hosts`` is ``-H``,
``hostfile`` is ``--hosts``, ``checkpoint`` is ``--checkpoint``; the rest keep their names:
``np``, ``max_restarts``, ``min_np``, ``runs_dir``, ``gpu_mode``, ``stall_timeout``,
``ring_check``, ``elastic``, ``max_np``, ``ssh_transport``, ...; ``dry_run`` and ``probe``
too). An option not passed (or passed as None) takes the same defaults as the command: a
``RINGTRAIN_<KEY>`` variable, then the project's ``ringtrain.toml``, then the user's config
file (assembly/settings.py), then the built-in one; ``hosts`` or ``hostfile`` sets the
configured hosts aside, and a config file's ``env`` goes under ``env=``. ``env=`` values are
secrets (by a 0600 file to the ranks, never shown); ``env_plain=`` (``--env-plain``) passes
values that are not.

It builds the same LaunchSpec through the same function and assembles it through the
same ``ringtrain.assembly.prepare`` as the command: the same entry check, hosts, srun refusal
and ring pre-check, the same Session. A mistake raises the same typed error
(``ringtrain.errors.UsageError`` and friends). The run's life after that is the command's too
(launch/lifecycle.py): the run's events.log and events.jsonl, the stop and preemption signals,
the teardown's and the recovery's lines and the error of a failed job. Nothing is printed
unless a ``reporter`` is given.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from pathlib import Path
from typing import Any, Literal, overload

from ringtrain.assembly import (
    KEYWORD_SPELLING,
    LaunchOptions,
    build_spec,
    check_host_source,
    prepare,
    settings,
    write_plan,
)
from ringtrain.errors import UsageError
from ringtrain.launch import lifecycle
from ringtrain.launch.lifecycle import Recorder
from ringtrain.launch.plan.make import LaunchPlan
from ringtrain.launch.record.result import JobResult, JobState
from ringtrain.launch.reporter import NullReporter, Reporter
from ringtrain.remote import Remote
from ringtrain.spec import EnvSpec

log = logging.getLogger(__name__)

_RENAMED = {"hosts": "host_spec", "hostfile": "hosts_file", "checkpoint": "checkpoint_url"}


@overload
def run(script: str, *args: str, reporter: Reporter | None = ..., remote: Remote | None = ...,
        check: bool = ..., dry_run: Literal[False] = ..., probe: bool = ...,
        **options: Any) -> JobResult: ...


@overload
def run(script: str, *args: str, reporter: Reporter | None = ..., remote: Remote | None = ...,
        check: bool = ..., dry_run: Literal[True], probe: bool = ...,
        **options: Any) -> LaunchPlan: ...


def run(
    script: str,
    *args: str,
    reporter: Reporter | None = None,
    remote: Remote | None = None,
    check: bool = False,
    dry_run: bool = False,
    probe: bool = True,
    **options: Any,
) -> JobResult | LaunchPlan:
    """Launch ``script`` with ``args`` on the hosts asked for; block until the job (and its
    restarts) end; return the last attempt's JobResult. ``check=True`` raises JobFailed
    (the CLI's error text: the root cause, what ringtrain did, the fix) instead of returning a
    failed result. Called from the main thread, SIGINT, SIGTERM and SIGHUP stop the job on
    every host and SIGUSR1 commits a checkpoint first, as under ``ringtrain launch``; a job so
    stopped raises JobFailed whatever ``check`` says. ``dry_run=True``
    writes the run directory and returns the LaunchPlan attempt 1 would run, starting
    nothing (``ringtrain launch --dry-run``); ``probe=False`` is ``--no-probe``."""
    layers = settings.load(Path.cwd(), os.environ)
    for skipped in layers.skipped:
        log.warning("%s; fix: %s", skipped.describe(), skipped.fix(os.geteuid()))
    opts = _options(script, args, options, layers)
    if not probe:
        opts = dataclasses.replace(opts, no_probe=True)
    recorder = Recorder(reporter or NullReporter())  # the events files, as under the CLI
    session = prepare(build_spec(opts, Path.cwd()), recorder, os.environ, remote=remote,
                      dry_run=dry_run)
    if dry_run:
        return write_plan(session)
    result = lifecycle.run(session, recorder)
    failed = lifecycle.failed(session, result)
    stopped = result.state is JobState.INTERRUPTED or session.preemption is not None
    if failed is not None and (check or stopped):
        raise failed
    return result


def _options(script: str, args: tuple[str, ...], given: dict[str, Any],
             layers: settings.Config) -> LaunchOptions:
    """The keyword arguments as LaunchOptions fields, over the configured defaults."""
    names = {f.name for f in dataclasses.fields(LaunchOptions)} - {"script", "script_args"}
    public = sorted({_public(n) for n in names})
    values: dict[str, Any] = {}
    given = dict(given)
    plain = given.pop("env_plain", None)  # --env-plain: values that are no secret
    for key, value in given.items():
        name = _RENAMED.get(key, key)
        if name not in names:
            raise UsageError(
                f"ringtrain.run() got an unknown option {key!r}",
                f"use one of: {', '.join(public)}",
            )
        values[name] = _coerce(name, value)
    if plain is not None:
        values["env"] = (*(values.get("env") or ()), *_env(plain, plain=True))
    check_host_source(values.get("hosts_file"), values.get("host_spec"),
                      values.get("hosts_format"), KEYWORD_SPELLING)  # in keyword words, not flags
    return LaunchOptions(script=script, script_args=tuple(args),
                         **settings.layered(values, layers))


def _env(value: Any, plain: bool = False) -> tuple[EnvSpec, ...]:
    """``env=`` (secrets) or ``env_plain=``: a dict, or NAME / NAME=VALUE strings and pairs."""
    items = value.items() if isinstance(value, dict) else value
    return tuple(
        EnvSpec.parse(v, plain) if isinstance(v, str) else EnvSpec(str(v[0]), str(v[1]), plain)
        for v in items
    )


def _public(name: str) -> str:
    return next((k for k, v in _RENAMED.items() if v == name), name)


def _coerce(name: str, value: Any) -> Any:
    """What a Python caller naturally passes -> what the command line would have given."""
    if name in ("runs_dir", "ssh_config", "known_hosts") and value is not None:
        return Path(value)
    if name == "env":
        return _env(value)
    if name in ("mpi_args", "srun_args") and isinstance(value, str):  # as --srun-args
        try:
            value = tuple(shlex.split(value))
        except ValueError as err:
            raise UsageError(f"{name}={value!r}: {err}", "quote each word with blanks once, "
                             "or pass a list of words") from None
    if name in ("include", "exclude", "trust_groups") and isinstance(value, str):
        return (value,)
    if name == "slots" and isinstance(value, dict):
        return tuple((str(k), int(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(value)
    return value
