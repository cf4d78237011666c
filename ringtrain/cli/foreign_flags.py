"""Other launchers' flags, as their users type them at ``ringtrain``: one table, each flag with
the tool it comes from, ringtrain's equivalent (or none, and what ringtrain does instead), and
a refusal that names both and prints the command line corrected. PURE: the command group hands
``find`` the sub-command's words and the options it takes.

Flags are refused, never taken silently: where ringtrain has an exact equivalent that is safe
to accept under the tool's own name, it is an alias of the option instead (horovodrun's
``--num-proc``, ``--hostfile``, ``-hostfile``, ``--min-num-proc``) and not in this table. The
table is checked against Horovod's own parser and the real mpirun's option list
(tests/unit/test_foreign_flags.py); torchrun's and DeepSpeed's names are from their sources,
named beside their rows. docs/FROM_OTHER_LAUNCHERS.md is ``markdown()``'s output.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringtrain.errors import UsageError

HOROVODRUN, TORCHRUN, DEEPSPEED, MPIRUN = "horovodrun", "torchrun", "DeepSpeed", "mpirun"


@dataclass(frozen=True, slots=True)
class Foreign:
    """One option of another launcher. ``instead``: ringtrain's words for it, ``{0}``, ``{1}``
    the option's values and ``{flag}`` the flag as typed; empty: ringtrain has no equivalent
    and ``why`` says what it does instead."""

    flags: tuple[str, ...]
    tools: tuple[str, ...]
    metavars: tuple[str, ...]  # one per value the option takes
    means: str
    instead: tuple[str, ...] = ()
    why: str = ""

    @property
    def nargs(self) -> int:
        return len(self.metavars)

    @property
    def equivalent(self) -> str | None:
        """ringtrain's option, or None."""
        return self.instead[0] if self.instead else None

    def words(self, flag: str, values: Sequence[str]) -> list[str]:
        """ringtrain's words for ``flag values`` (a value not given shows as its metavar)."""
        filled = [*values, *self.metavars[len(values):]]
        return [w.format(*filled, flag=flag) for w in self.instead]

    def tool_names(self) -> str:
        return " and ".join(f"{t}'s" for t in self.tools)


def _env(var: str, value: str = "{0}") -> tuple[str, ...]:
    return ("--env", f"{var}={value}")


def _mpi(*metavars: str) -> tuple[str, ...]:
    return ("--mpi-args", " ".join(("{flag}", *(f"{{{i}}}" for i in range(len(metavars))))))


_H, _T, _D, _M = (HOROVODRUN,), (TORCHRUN,), (DEEPSPEED,), (MPIRUN,)
_TD = (TORCHRUN, DEEPSPEED)
_NO_RDZV = ("ringtrain starts every rank itself, with mpirun, horovodrun or srun: there is no "
            "rendezvous, node rank or master address to give")
_PER_HOST = ("--slots", "*={0}")
_LOGS = ("every rank's output is on the console and in its own log, "
         "RUNS_DIR/RUN_ID/attempt-N/rank.N.log")

TABLE: tuple[Foreign, ...] = (
    # horovodrun: horovod/runner/launch.py parse_args(), checked against it by the tests
    Foreign(("--slots-per-host",), _H, ("N",), "slots per host", _PER_HOST),
    Foreign(("--host-discovery-script",), _H, ("SCRIPT",), "a program that prints the hosts",
            ("--hosts", "{0}")),
    Foreign(("--reset-limit",), _H, ("N",), "elastic resets before giving up",
            why="under --elastic ringtrain sets no reset limit; --max-restarts bounds the "
            "cold restarts"),
    Foreign(("--config-file",), _H, ("FILE",), "a YAML file of flags",
            why="ringtrain reads ringtrain.toml and ~/.config/ringtrain/config.toml "
            "(`ringtrain config` shows them)"),
    Foreign(("-cb", "--check-build"), _H, (), "show how Horovod was built",
            why="`ringtrain check --hosts FILE` shows every host's Horovod and MPI versions"),
    Foreign(("--disable-cache",), _H, (), "skip the cached host checks",
            why="ringtrain caches no host check: the probe runs at every launch "
            "(--no-probe skips it)"),
    Foreign(("--mpi",), _H, (), "run with MPI",
            why="MPI is the default: --backend mpirun, or --backend horovodrun without --gloo"),
    Foreign(("--jsrun",), _H, (), "run with IBM's jsrun",
            why="ringtrain starts ranks with mpirun, horovodrun or srun (--backend)"),
    Foreign(("--tcp",), _H, (), "TCP only, no InfiniBand", _env("NCCL_IB_DISABLE", "1")),
    Foreign(("--binding-args",), _H, ("ARGS",), "mpirun's binding arguments",
            ("--mpi-args", "{0}")),
    Foreign(("--num-nccl-streams",), _H, ("N",), "NCCL streams",
            _env("HOROVOD_NUM_NCCL_STREAMS")),
    Foreign(("--thread-affinity",), _H, ("CORE",), "the background thread's core",
            _env("HOROVOD_THREAD_AFFINITY")),
    Foreign(("--torus-allreduce",), _H, (), "torus all-reduce",
            _env("HOROVOD_TORUS_ALLREDUCE", "1")),
    Foreign(("--no-torus-allreduce",), _H, (), "no torus all-reduce",
            _env("HOROVOD_TORUS_ALLREDUCE", "0")),
    Foreign(("--no-autotune",), _H, (), "no autotuning",
            why="autotuning is off unless --autotune is given"),
    Foreign(("--autotune-warmup-samples",), _H, ("N",), "autotune warm-up samples",
            _env("HOROVOD_AUTOTUNE_WARMUP_SAMPLES")),
    Foreign(("--autotune-steps-per-sample",), _H, ("N",), "autotune steps per sample",
            _env("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE")),
    Foreign(("--autotune-bayes-opt-max-samples",), _H, ("N",), "autotune samples",
            _env("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES")),
    Foreign(("--autotune-gaussian-process-noise",), _H, ("X",), "autotune noise",
            _env("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE")),
    Foreign(("--no-timeline-mark-cycles",), _H, (), "no cycle marks in the timeline",
            why="cycles are marked only with --timeline-mark-cycles"),
    Foreign(("--stall-check",), _H, (), "Horovod's stall check, on by default",
            why="Horovod's stall check is on unless turned off"),
    Foreign(("--no-stall-check",), _H, (), "no Horovod stall check",
            _env("HOROVOD_STALL_CHECK_DISABLE", "1")),
    Foreign(("--stall-check-warning-time-seconds",), _H, ("S",), "stall warning after S",
            _env("HOROVOD_STALL_CHECK_TIME_SECONDS")),
    Foreign(("--stall-check-shutdown-time-seconds",), _H, ("S",), "stall shutdown after S",
            _env("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")),
    Foreign(("--mpi-threads-disable",), _H, (), "no MPI threads",
            _env("HOROVOD_MPI_THREADS_DISABLE", "1")),
    Foreign(("--no-mpi-threads-disable",), _H, (), "MPI threads",
            _env("HOROVOD_MPI_THREADS_DISABLE", "0")),
    Foreign(("--log-with-timestamp",), _H, (), "times in Horovod's log",
            _env("HOROVOD_LOG_HIDE_TIME", "0")),
    Foreign(("--log-without-timestamp",), _H, (), "no times in Horovod's log",
            _env("HOROVOD_LOG_HIDE_TIME", "1")),
    Foreign(("--log-hide-timestamp",), _H, (), "no times in Horovod's log",
            _env("HOROVOD_LOG_HIDE_TIME", "1")),
    Foreign(("--no-log-hide-timestamp",), _H, (), "times in Horovod's log",
            _env("HOROVOD_LOG_HIDE_TIME", "0")),
    Foreign(("-prefix-timestamp", "--prefix-output-with-timestamp"), _H, (),
            "time-stamped output lines",
            why="the run directory's events.log has the times; each rank's output is in its "
            "rank.N.log"),
    Foreign(("--version",), _H, (), "Horovod's version",
            why="`ringtrain --version` is ringtrain's; `ringtrain check` shows each host's "
            "Horovod"),
    # torchrun: torch/distributed/run.py get_args_parser() (not installed here)
    Foreign(("--nproc-per-node", "--nproc_per_node"), _T, ("N",), "processes per node",
            _PER_HOST),
    Foreign(("--nnodes",), _T, ("N",), "the number of nodes",
            why="ringtrain uses the hosts of --hosts/-H (--include picks some; -np counts "
            "ranks)"),
    Foreign(("--rdzv-backend", "--rdzv_backend"), _T, ("NAME",), "rendezvous backend",
            why=_NO_RDZV),
    Foreign(("--rdzv-endpoint", "--rdzv_endpoint"), _T, ("HOST:PORT",), "rendezvous address",
            why=_NO_RDZV),
    Foreign(("--rdzv-id", "--rdzv_id"), _T, ("ID",), "rendezvous job id", why=_NO_RDZV),
    Foreign(("--rdzv-conf", "--rdzv_conf"), _T, ("K=V,...",), "rendezvous settings",
            why=_NO_RDZV),
    Foreign(("--standalone",), _T, (), "a local rendezvous", why=_NO_RDZV),
    Foreign(("--max_restarts",), _T, ("N",), "restarts of the worker group",
            ("--max-restarts", "{0}")),
    Foreign(("--monitor-interval", "--monitor_interval"), _T, ("S",), "worker polling",
            why="ringtrain's --heartbeat-timeout and --stall-timeout bound how long a lost "
            "or hung rank goes unnoticed"),
    Foreign(("--start-method", "--start_method"), _T, ("METHOD",), "how workers start",
            why="every rank is its own process, started by the launcher (--backend)"),
    Foreign(("--role",), _T, ("NAME",), "the workers' role", why="ringtrain has no roles"),
    Foreign(("--no-python", "--no_python"), _TD, (), "run SCRIPT without python",
            why="a SCRIPT that is not a .py file already runs as a program"),
    Foreign(("--run-path", "--run_path"), _T, (), "runpy in the agent's interpreter",
            why="each rank runs SCRIPT in its own interpreter (--python)"),
    Foreign(("--log-dir", "--log_dir"), _T, ("DIR",), "where worker logs go",
            ("--runs-dir", "{0}")),
    Foreign(("-r", "--redirects"), _T, ("SPEC",), "ranks' output into files",
            why=_LOGS),
    Foreign(("-t", "--tee"), _T, ("SPEC",), "ranks' output to files and console",
            why=_LOGS),
    Foreign(("--local-ranks-filter", "--local_ranks_filter"), _T, ("RANKS",),
            "whose output shows, by local rank", ("--console-ranks", "{0}")),
    Foreign(("--node-rank", "--node_rank"), _TD, ("N",), "this node's rank", why=_NO_RDZV),
    Foreign(("--master-addr", "--master_addr"), _TD, ("ADDR",), "rank 0's address",
            why=_NO_RDZV),
    Foreign(("--master-port", "--master_port"), _TD, ("PORT",), "rank 0's port", why=_NO_RDZV),
    Foreign(("--local-addr", "--local_addr"), _T, ("ADDR",), "this node's address",
            why="--network-interface names the interfaces or CIDRs the ranks talk over"),
    # DeepSpeed: deepspeed/launcher/runner.py parse_args() (not installed here); its -H/-i
    # collide with ringtrain's (-H hostfile is refused in hostfile/load.py)
    Foreign(("-e",), _D, ("NODE_SPEC",), "hosts or GPUs left out", ("--exclude", "{0}")),
    Foreign(("--num_nodes",), _D, ("N",), "use the first N hosts",
            why="ringtrain uses the hosts of --hosts/-H (--include picks some; -np counts "
            "ranks)"),
    Foreign(("--num_gpus", "--num_accelerators"), _D, ("N",), "GPUs per node", _PER_HOST),
    Foreign(("--min_elastic_nodes",), _D, ("N",), "elastic minimum, in nodes",
            why="ringtrain's --elastic counts ranks: --min-np"),
    Foreign(("--max_elastic_nodes",), _D, ("N",), "elastic maximum, in nodes",
            why="ringtrain's --elastic counts ranks: --max-np"),
    Foreign(("--elastic_training",), _D, (), "elastic training", ("--elastic",)),
    Foreign(("--launcher",), _D, ("NAME",), "pdsh, openmpi, slurm, ...",
            why="--backend mpirun, horovodrun or srun"),
    Foreign(("--launcher_args",), _D, ("ARGS",), "the launcher's own arguments",
            ("--mpi-args", "{0}")),
    Foreign(("--no_local_rank",), _D, (), "no --local_rank argument",
            why="ringtrain passes no --local_rank; LOCAL_RANK is in every rank's environment"),
    Foreign(("--no_ssh",), _D, (), "start each node by hand",
            why="ringtrain starts every host from here; inside Slurm it uses srun"),
    Foreign(("--no_ssh_check",), _D, (), "skip the SSH check", ("--no-probe",)),
    Foreign(("--force_multi",), _D, (), "multi-node mode on one host",
            why="one remote host is launched like many"),
    Foreign(("--save_pid",), _D, (), "write the launcher's pid",
            why="the run directory holds the run's record; `ringtrain runs` lists the runs"),
    Foreign(("--enable_each_rank_log",), _D, ("DIR",), "one log per rank",
            ("--runs-dir", "{0}")),
    Foreign(("--ssh_port",), _D, ("PORT",), "the SSH port", ("--ssh-port", "{0}")),
    Foreign(("--bind_cores_to_rank",), _D, (), "bind ranks to cores",
            ("--mpi-args", "--bind-to core")),
    # mpirun (Open MPI 4.1): checked against `mpirun --help all` by the tests
    Foreign(("-x",), _M, ("NAME[=VALUE]",), "export a variable", ("--env", "{0}")),
    Foreign(("-mca", "--mca"), _M, ("KEY", "VALUE"), "an MCA parameter", _mpi("K", "V")),
    Foreign(("-n", "--n"), _M, ("N",), "the number of processes", ("-np", "{0}")),
    Foreign(("-N", "-npernode", "--npernode"), _M, ("N",), "processes per node", _PER_HOST),
    Foreign(("-machinefile", "--machinefile"), _M, ("FILE",), "the host file",
            ("--hosts", "{0}")),
    Foreign(("-host", "--host"), _M, ("HOSTS",), "hosts inline", ("-H", "{0}")),
    Foreign(("-map-by", "--map-by"), _M, ("POLICY",), "rank placement", _mpi("P")),
    Foreign(("-bind-to", "--bind-to"), _M, ("POLICY",), "process binding", _mpi("P")),
    Foreign(("-oversubscribe", "--oversubscribe"), _M, (), "more ranks than slots", _mpi()),
    Foreign(("-report-bindings", "--report-bindings"), _M, (), "print the bindings", _mpi()),
    Foreign(("-display-map", "--display-map"), _M, (), "print the rank map", _mpi()),
    Foreign(("-wdir", "--wdir", "-wd", "--wd"), _M, ("DIR",), "the ranks' directory",
            why="ranks start in the directory ringtrain runs from (the same path on "
            "every host)"),
    Foreign(("-tag-output", "--tag-output"), _M, (), "rank tags on output lines",
            why="ringtrain tags every line with its rank already"),
    Foreign(("-allow-run-as-root", "--allow-run-as-root"), _M, (), "run as root",
            why="ringtrain adds it to mpirun when it runs as root"),
)

BY_FLAG: dict[str, Foreign] = {flag: entry for entry in TABLE for flag in entry.flags}


@dataclass(frozen=True, slots=True)
class Found:
    """A foreign flag in a command's words: where, and the values it took."""

    entry: Foreign
    flag: str
    start: int
    end: int  # the words [start:end] are the flag and its values
    values: tuple[str, ...]


def find(words: Sequence[str], takes: Mapping[str, int], *, interspersed: bool,
         helps: frozenset[str] = frozenset()) -> Found | None:
    """The first foreign flag among a command's options. ``takes``: each of the command's own
    option names -> how many values it takes (an own option is never foreign). The options
    end at ``--``, at a help option, and, unless ``interspersed``, at the first argument
    (``launch``'s SCRIPT: what follows is the script's own)."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or word in helps:
            return None
        if not word.startswith("-") or word == "-":
            if not interspersed:
                return None
            i += 1
            continue
        name, eq, attached = word.partition("=")
        if name in takes:
            i += 1 + (0 if eq else takes[name])
            continue
        entry = BY_FLAG.get(name)
        if entry is not None:
            if eq:
                values: tuple[str, ...] = (attached,)
                end = i + 1
            else:
                end = min(i + 1 + entry.nargs, len(words))
                values = tuple(words[i + 1:end])
            return Found(entry, name, i, end, values)
        i += 1  # someone else's unknown option: click answers it
    return None


def refusal(found: Found, command: str, words: Sequence[str],
            takes: Mapping[str, int]) -> UsageError:
    """The error for ``found``: whose flag it is, ringtrain's equivalent, and the command line
    with it replaced (or dropped where ``command`` has no equivalent)."""
    entry = found.entry
    equivalent = entry.equivalent
    has_it = equivalent is not None and equivalent in takes
    fixed = [*words[:found.start], *(entry.words(found.flag, found.values) if has_it else ()),
             *words[found.end:]]
    line = shlex.join(["ringtrain", command, *fixed])
    message = (f"{found.flag} is {entry.tool_names()} option ({entry.means}); ringtrain "
               f"{command} has no such option")
    if has_it:
        hint = f"ringtrain's equivalent is {_shown(entry.words(found.flag, ()))}: {line}"
    elif equivalent is not None:
        hint = f"ringtrain {command} has no {equivalent}; drop {found.flag}: {line}"
    else:
        hint = f"{entry.why}; drop it: {line}"
    return UsageError(message, hint)


def _shown(words: Sequence[str]) -> str:
    """Words with metavars for prose: quoted where a shell would split or expand them."""
    return " ".join(shlex.quote(w) if any(c in w for c in " *?") else w for w in words)


def markdown() -> str:
    """The table as docs/FROM_OTHER_LAUNCHERS.md shows it."""
    rows = ["| Tool | Flag | ringtrain |", "|---|---|---|"]
    for entry in TABLE:
        flags = " ".join(f"`{f}`" for f in entry.flags)
        if entry.metavars:
            flags += " " + " ".join(entry.metavars)
        said = (f"`{_shown(entry.words(entry.flags[-1], ()))}`" if entry.instead
                else f"none: {entry.why}")
        rows.append(f"| {', '.join(entry.tools)} | {flags} ({entry.means}) | {said} |")
    return "\n".join(rows) + "\n"
