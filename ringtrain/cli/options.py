"""Helpers for option sets shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ringtrain.hostfile import FORMATS

F = TypeVar("F", bound=Callable[..., Any])


def stacked(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator applying ``decorators`` as if written top to bottom above the function
    (click shows options in that order)."""

    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


def host_source_options(hosts_help: str = "Inventory file (hostfile, YAML, TOML, ...); "
                        "--hostfile as horovodrun spells it.") -> Callable[[F], F]:
    """Where the hosts come from: ``--hosts FILE`` or ``-H h1:N,...`` (one of them; a
    configured ``hosts`` gives way to either), and the inventory's format."""
    return stacked(
        click.option("--hosts", "--hostfile", "-hostfile", "hosts_file", metavar="SOURCE",
                     help=hosts_help),
        click.option("-H", "host_spec", metavar="h1:N,h2:N",
                     help="Hosts inline, horovodrun style."),
        click.option("--hosts-format", type=click.Choice(FORMATS),
                     help="Force the inventory format instead of detecting it."),
    )


def ssh_options() -> Callable[[F], F]:
    """How the hosts are reached over SSH (``launch`` and ``check``)."""
    return stacked(
        click.option("-F", "--ssh-config", type=click.Path(path_type=Path),
                     help="ssh_config for remote hosts (like ssh -F)."),
        click.option("--known-hosts", type=click.Path(path_type=Path),
                     help="known_hosts to verify keys (default: UserKnownHostsFile or "
                     "~/.ssh/known_hosts)."),
        click.option("-p", "--ssh-port", type=click.IntRange(1, 65535),
                     help="SSH port of every host whose inventory line names none "
                     "(horovodrun's -p)."),
        click.option("-i", "--ssh-identity-file", metavar="FILE",
                     help="SSH private key for every host whose inventory line names none "
                     "(horovodrun's -i)."),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Trust keys of hosts not yet in known_hosts (OpenSSH's accept-new); "
                     "a changed key is always refused."),
        ssh_transport_option,
    )


def placement_options() -> Callable[[F], F]:
    """Which hosts and slots a launch may use, and the ring order (``launch``, ``check`` and
    ``hosts``)."""
    return stacked(
        click.option("--min-hosts", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Refuse when fewer hosts are usable, or when the ranks would fill "
                     "fewer."),
        click.option("--include", multiple=True, metavar="PATTERN",
                     help="Use only matching hosts."),
        click.option("--exclude", multiple=True, metavar="PATTERN",
                     help="Leave matching hosts out."),
        click.option("--slots", "slots", multiple=True, callback=slot_override,
                     metavar="PATTERN=N",
                     help="Override the slots of matching hosts (glob or host list, e.g. "
                     "gpu03=2)."),
        click.option("--ring-label", metavar="LABEL",
                     help="Keep ring neighbours within this label (e.g. rack)."),
    )


def slot_override(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, int], ...]:
    out = []
    for value in values:
        pattern, eq, count = value.rpartition("=")
        if not eq or not pattern or not count.isdigit():
            raise click.BadParameter(f"{value!r} is not PATTERN=N, e.g. gpu03=2")
        out.append((pattern, int(count)))
    return tuple(out)


def ssh_transport_option(func: Any) -> Any:
    """``--ssh-transport``: how the probe and teardown reach hosts (``launch`` and ``check``;
    config key ``ssh_transport``)."""
    return click.option(
        "--ssh-transport", type=click.Choice(["paramiko", "openssh"]), default="paramiko",
        show_default=True,
        help="How the probe and teardown reach hosts: paramiko, or openssh (OpenSSH's own ssh, "
        "as mpirun's: hostbased auth, Kerberos/GSSAPI and @cert-authority host keys work).",
    )(func)


def ring_check_options(flag: str) -> Callable[[F], F]:
    """The ring check's options, shared by ``check --ring`` and ``launch --ring-check``."""
    return stacked(
        click.option(flag, "ring_check", is_flag=True,
                     help="After the probe, measure every host pair's bandwidth and latency "
                     "with real MPI traffic (N-1 rounds of disjoint pairs) and the ring "
                     "all-reduce over all hosts; name a slow host or link."),
        click.option("--expect-link", metavar="RATE",
                     help="The links' rate (25gbit, 100mbit, 3GB/s): pairs are compared with "
                     "it, not with the measured median."),
        click.option("--slow-ratio", type=click.FloatRange(0.01, 1.0), default=0.5,
                     show_default=True,
                     help="A pair below this fraction of the reference rate is slow."),
        click.option("--on-slow-host", type=click.Choice(["warn", "exclude"]), default="warn",
                     show_default=True,
                     help="A slow host found by the ring check is reported, or left out."),
    )


def horovod_tuning_options() -> Callable[[F], F]:
    """horovodrun's tuning flags, with horovodrun's names and meaning (ringtrain/hvd_tuning.py:
    the HOROVOD_* variables horovodrun sets for them)."""
    return stacked(
        click.option("--fusion-threshold-mb", type=click.IntRange(min=0), metavar="MB",
                     help="Horovod's tensor fusion buffer (HOROVOD_FUSION_THRESHOLD), as "
                     "horovodrun's flag."),
        click.option("--cycle-time-ms", type=click.FloatRange(min=0), metavar="MS",
                     help="Horovod's cycle time (HOROVOD_CYCLE_TIME)."),
        click.option("--cache-capacity", type=click.IntRange(min=0), metavar="N",
                     help="Horovod's response cache size (HOROVOD_CACHE_CAPACITY)."),
        click.option("--hierarchical-allreduce/--no-hierarchical-allreduce", default=None,
                     help="Horovod's hierarchical all-reduce (HOROVOD_HIERARCHICAL_ALLREDUCE)."),
        click.option("--hierarchical-allgather/--no-hierarchical-allgather", default=None,
                     help="Horovod's hierarchical all-gather (HOROVOD_HIERARCHICAL_ALLGATHER)."),
        click.option("--autotune", is_flag=True,
                     help="Horovod's autotuning of fusion and cycle time (HOROVOD_AUTOTUNE)."),
        click.option("--autotune-log-file", metavar="FILE",
                     help="With --autotune: where Horovod logs its samples."),
        click.option("--timeline-filename", metavar="FILE",
                     help="Horovod's timeline, written by rank 0 (HOROVOD_TIMELINE)."),
        click.option("--timeline-mark-cycles", is_flag=True,
                     help="With --timeline-filename: mark Horovod's cycles in it."),
        click.option("--log-level", "hvd_log_level",
                     type=click.Choice(["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"],
                                       case_sensitive=False),
                     help="Horovod's own log level (HOROVOD_LOG_LEVEL), as horovodrun's flag; "
                     "ringtrain's is -v/-q."),
        click.option("--gloo-timeout-seconds", type=click.IntRange(min=1), metavar="S",
                     help="How long a Gloo operation waits for a peer before it fails "
                     "(HOROVOD_GLOO_TIMEOUT_SECONDS; Horovod's default 30). Under --elastic "
                     "it bounds how long survivors wait on a lost rank: see docs/ELASTIC.md."),
        click.option("--output-filename", metavar="DIR",
                     help="horovodrun writes each rank's output under DIR; ringtrain already "
                     "keeps every rank's output in runs/<id>/attempt-N/rank.<N>.log and says "
                     "so (nothing is written to DIR)."),
    )


def restart_options() -> Callable[[F], F]:
    """``launch``'s restart policy."""
    return stacked(
        click.option("--max-restarts", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Restart a failed job this many times, from its newest checkpoint."),
        click.option("--min-np", "--min-num-proc", "min_np", type=click.IntRange(min=1),
                     help="After excluding failed hosts, restart with fewer ranks, down to "
                     "this (--min-num-proc as horovodrun spells it)."),
        click.option("--stall-restarts", type=click.IntRange(min=0), default=3,
                     show_default=True,
                     help="Stop instead of restarting after this many restarts in a row that "
                     "each crashed with no new checkpoint committed (a crash loop); 0: never."),
        click.option("--recheck-timeout", type=click.FloatRange(min=0), default=15.0,
                     show_default=True, metavar="SECONDS",
                     help="Before a restart, wait up to this long for the failed attempt's "
                     "hosts to free their GPUs (a dead rank's memory); a host still busy sits "
                     "out a cooldown. 0: no re-check."),
    )


def elastic_options() -> Callable[[F], F]:
    """``launch --elastic``: horovodrun's elastic flags, with their names."""
    return stacked(
        click.option("--elastic", is_flag=True,
                     help="Run under Horovod's elastic driver (horovodrun --gloo, the hosts "
                     "from ringtrain's pre-flight): when a rank or host is lost the others "
                     "keep their processes and go on from their last commit, down to "
                     "--min-np ranks (default 1). The script uses hvd.elastic "
                     "(see docs/ELASTIC.md)."),
        click.option("--max-np", "--max-num-proc", "max_np", type=click.IntRange(min=1),
                     help="--elastic: grow up to this many ranks when hosts come back "
                     "(--max-num-proc as horovodrun spells it)."),
        click.option("--elastic-timeout", type=click.IntRange(min=1), default=600,
                     show_default=True, metavar="SECONDS",
                     help="--elastic: how long to wait for --min-np slots after a loss."),
        click.option("--blacklist-cooldown-range", type=(click.IntRange(1, 3600),
                                                         click.IntRange(1, 3600)),
                     default=(60, 240), show_default=True, metavar="MIN MAX",
                     help="--elastic: seconds a failed host sits out before it may join "
                     "again: Horovod draws it between MIN and MAX and doubles it with each "
                     "failure, up to MAX (at most 3600)."),
        click.option("--spares", type=click.IntRange(min=0), default=0, show_default=True,
                     metavar="N",
                     help="--elastic: hold the last N hosts the pre-flight passed (or hosts "
                     "labelled spare: true) back as spares; a spare takes a lost host's place, "
                     "so the job keeps its size."),
        click.option("--warm-spares/--cold-spares", default=True, show_default=True,
                     help="--elastic: keep a process waiting on each spare slot with "
                     "TensorFlow and Horovod already imported, so a spare's rank starts "
                     "without paying for them (--cold-spares: start it from nothing)."),
    )


BAD_HOST_HELP = (
    "What a bad host does: fail (refuse the launch) or exclude (leave it out); repeat with "
    "CODE=fail|exclude|warn|ignore for one doctor reason code (pcie-width=exclude, xid=ignore). "
    "Codes: `ringtrain check --doctor --help`.")


def on_bad_host_option(func: Any) -> Any:
    """``--on-bad-host``, repeatable and comma-separated (``exclude,xid=warn``)."""
    return click.option(
        "--on-bad-host", multiple=True, metavar="fail|exclude|CODE=ACTION", help=BAD_HOST_HELP,
        callback=lambda _ctx, _param, values: tuple(
            v.strip() for value in values for v in value.split(",") if v.strip()),
    )(func)
