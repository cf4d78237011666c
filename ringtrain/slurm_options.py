"""The user's own srun and sbatch options, read as srun and sbatch read them. PURE.

``ringtrain launch --srun-args "--cpu-bind=cores --gpus-per-task=1"`` shapes the step and
``ringtrain slurm render --sbatch-arg=--mail-type=END`` the batch job; the options ringtrain
itself sets (the placement, the variables, the labelled output it reads the ranks' lines from)
are refused, each with the way to ask for the same thing. Both tools read long options as
getopt_long does: ``--lab`` is ``--label``, ``--exc`` is ambiguous (``--exclude``,
``--exclusive``), and so are they read here. The tables are srun's and sbatch's ``--help`` of
Slurm 22.05 (the test cluster's) plus srun's undocumented binding options; an option not in
them passes to srun, which judges it. srun's MPI plugin (``--mpi``): the user's own ``--mpi``
in the srun options, else ``SLURM_MPI_TYPE`` (srun's own variable; its command line wins over
it), else pmix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ringtrain.errors import UsageError

DEFAULT_MPI = "pmix"
_MPI_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,32}\Z")  # pmix, pmix_v4, pmi2, cray_shasta, none



def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_PLACEMENT = ("ringtrain places the ranks itself: the allocation, less the hosts the "
              "pre-flight left out",
              "use ringtrain's -np, --include/--exclude or --slots, or shape the job itself "
              "(ringtrain slurm render --nodes/--ntasks-per-node)")
_OUTPUT = ("ringtrain reads every rank's lines from srun's labelled output",
           "drop it: each rank's output is in runs/<id>/attempt-N/rank.<N>.log")
# srun's options ringtrain sets or depends on: long name -> (short letter, why, fix)
SRUN_OWNED: dict[str, tuple[str, str, str]] = {
    "nodes": ("N", *_PLACEMENT), "ntasks": ("n", *_PLACEMENT), "ntasks-per-node": ("", *_PLACEMENT),
    "nodelist": ("w", *_PLACEMENT), "nodefile": ("F", *_PLACEMENT),
    "distribution": ("m", *_PLACEMENT), "exclude": ("x", *_PLACEMENT),
    "relative": ("r", *_PLACEMENT),
    "export": ("", "ringtrain passes the launcher's environment and its own variables "
               "(--export=ALL,...)", "use --env NAME or --env NAME=VALUE"),
    "label": ("l", *_OUTPUT), "output": ("o", *_OUTPUT), "error": ("e", *_OUTPUT),
    "input": ("i", *_OUTPUT), "pty": ("", *_OUTPUT),
    "kill-on-bad-exit": ("K", "ringtrain ends the step when a rank fails "
                         "(--kill-on-bad-exit=1) and restarts it by its own policy",
                         "see --max-restarts and --min-np"),
    "multi-prog": ("", "every rank runs ringtrain's rank entry, which runs the script",
                   "run one program; it reads its RANK or SLURM_PROCID"),
    "jobid": ("", "the step runs in this job's allocation", "run ringtrain launch in that job"),
    "no-allocate": ("Z", "the step runs in this job's allocation", "drop it"),
}
# srun's options that take no value, or one only after '=' (``--exclusive[=user]``)
_SRUN_FLAGS = _names(
    "contiguous disable-status exact hold kill-on-bad-exit label multi-prog no-allocate "
    "no-kill overcommit overlap oversubscribe preserve-env pty quiet quit-on-interrupt reboot "
    "resv-ports spread-job test-only unbuffered use-min-nodes verbose help usage version "
    "exclusive nice compress propagate send-libs immediate")
_SRUN_VALUED = _names(
    "account acctg-freq bb bbf bcast bcast-exclude begin chdir cluster-constraint clusters "
    "comment constraint container core-spec cores-per-socket cpu-freq cpus-per-gpu "
    "cpus-per-task deadline delay-boot dependency distribution epilog error export gpu-bind "
    "gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags het-group input "
    "job-name jobid licenses mail-type mail-user mcs-label mem mem-per-cpu mem-per-gpu "
    "mincpus mpi nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu "
    "ntasks-per-node ntasks-per-socket output partition power priority profile prolog qos "
    "relative reservation signal slurmd-debug sockets-per-node switches task-epilog "
    "task-prolog thread-spec threads threads-per-core time time-min tmp wait wckey exclude "
    "cpu-bind mem-bind hint network accel-bind tres-per-task")
SRUN_LONG = _SRUN_FLAGS | _SRUN_VALUED
# srun's short options: those that take a value (attached or the next word), an optional one
# (attached only: -K1, -I30), or none
_SRUN_SHORT_VALUED = frozenset("AbcdDeFiJLmMnNopqrStTwWxCG")
_SRUN_SHORT_OPTIONAL = frozenset("IK")

SBATCH_LONG = _names(
    "account array bb bbf begin chdir cluster-constraint clusters comment constraint "
    "container contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task "
    "deadline delay-boot dependency distribution error exclude exclusive export export-file "
    "extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket "
    "gpus-per-task gres gres-flags help hold ignore-pbs input job-name licenses mail-type "
    "mail-user mcs-label mem mem-per-cpu mem-per-gpu mincpus nice no-kill no-requeue nodefile "
    "nodelist nodes ntasks ntasks-per-core ntasks-per-node ntasks-per-socket output "
    "overcommit oversubscribe parsable partition power priority profile propagate qos quiet "
    "reboot requeue reservation signal sockets-per-node spread-job switches test-only "
    "thread-spec threads-per-core time time-min tmp uid usage use-min-nodes verbose version "
    "wait wckey wrap open-mode")
# one #SBATCH word: printable, no blank (sbatch splits there), no quote, no '#'
_SBATCH_WORD_RE = re.compile(r"^--[a-z][a-z0-9-]*(=[\x21\x24-\x26\x28-\x7e]+)?\Z")


def meaning(name: str, known: frozenset[str]) -> tuple[str, ...]:
    """The long options ``--name`` means to getopt_long: itself, else those it abbreviates
    (several: ambiguous), else itself (an option the table does not know)."""
    if name in known:
        return (name,)
    return tuple(sorted(k for k in known if k.startswith(name))) or (name,)


def _long(word: str, flag: str, known: frozenset[str], tool: str) -> str:
    """``--name[=value]`` -> the one long option it is, or a refusal naming the candidates."""
    name = word[2:].partition("=")[0]
    means = meaning(name, known)
    if len(means) > 1:
        raise UsageError(f"{flag} {word}: {tool} reads --{name} as any of "
                         + ", ".join(f"--{m}" for m in means),
                         f"write the {tool} option in full")
    return means[0]


def _owned(word: str, name: str, flag: str) -> UsageError:
    _, why, fix = SRUN_OWNED[name]
    said = f"{word} (srun's --{name})" if not word.startswith(f"--{name}") else word
    return UsageError(f"{flag} {said}: ringtrain sets this srun option itself: {why}", fix)


def check_srun_args(words: Sequence[str], other_launcher: str | None = None,
                    flag: str = "--srun-args") -> None:
    """Refuse the srun options ringtrain owns, an abbreviation that srun would read as one of
    them or as several options, a word srun would take for the program to run, and srun
    options for a launch that ``other_launcher`` (mpirun, horovodrun) starts."""
    if words and other_launcher is not None:
        raise UsageError(f"{flag} is for srun; this launch starts the ranks with "
                         f"{other_launcher}", f"drop {flag}, or use --backend srun (inside a "
                         "Slurm job, the default)")
    i = 0
    while i < len(words):
        word = words[i]
        if not isinstance(word, str) or not word.isprintable():
            raise UsageError(f"{flag}: {word!r} is not a printable word", f"check {flag}")
        if word == "--":
            raise UsageError(f"{flag}: after '--' srun takes the program to run; the ranks' "
                             "program is ringtrain's", "drop the '--'")
        if word.startswith("--"):
            takes_next = _srun_long(word, flag)
        elif word.startswith("-") and len(word) > 1:
            takes_next = _srun_short(word, flag)
        else:
            raise UsageError(
                f"{flag}: srun would run {word!r} as the program, in place of the ranks",
                "pass srun's options only, a value after '=' (--cpu-bind=cores)")
        if takes_next and i + 1 == len(words):
            raise UsageError(f"{flag} {word}: this srun option needs a value",
                             f"write {word}=VALUE" if word.startswith("--") else
                             f"write {word} VALUE")
        i += 2 if takes_next else 1


def _srun_long(word: str, flag: str) -> bool:
    """Check ``--name[=value]``; True when its value is the next word (``--cpu-bind cores``)."""
    name = _long(word, flag, SRUN_LONG, "srun")
    if name in SRUN_OWNED:
        raise _owned(word, name, flag)
    return "=" not in word and name not in _SRUN_FLAGS


def _srun_short(word: str, flag: str) -> bool:
    """Check ``-lK``, ``-c4``, ``-c``; True when the value is the next word (``-c 4``)."""
    short_owned = {s: n for n, (s, _, _) in SRUN_OWNED.items() if s}
    for at, letter in enumerate(word[1:], start=1):
        if letter in short_owned:
            raise _owned(word, short_owned[letter], flag)
        if letter in _SRUN_SHORT_OPTIONAL:
            return False
        if letter in _SRUN_SHORT_VALUED:
            return at == len(word) - 1
    return False


def srun_mpi(words: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """srun's ``--mpi`` value ringtrain passes: None when the user's srun options name one
    (theirs stands alone), else ``SLURM_MPI_TYPE``, else pmix."""
    if any(w.startswith("--") and meaning(w[2:].partition("=")[0], SRUN_LONG) == ("mpi",)
           for w in words):
        return None
    chosen = environ.get("SLURM_MPI_TYPE", "").strip()
    if not chosen:
        return DEFAULT_MPI
    if not _MPI_NAME_RE.match(chosen):
        raise UsageError(f"SLURM_MPI_TYPE={chosen!r} is not an MPI plugin name",
                         "unset it, or set one that `srun --mpi=list` names (pmix, pmi2)")
    return chosen


def check_sbatch_arg(word: str, owned: Mapping[str, str]) -> str:
    """One ``--sbatch-arg`` as its ``#SBATCH`` line's text; ``owned``: the sbatch options
    ringtrain writes itself -> the ``ringtrain slurm`` option that sets it."""
    if not isinstance(word, str) or not _SBATCH_WORD_RE.match(word):
        raise UsageError(
            f"--sbatch-arg {word!r} is not one sbatch option as a #SBATCH line carries it",
            "pass one long option per --sbatch-arg, --name or --name=VALUE, the value "
            "without blanks, quotes or '#' (e.g. --sbatch-arg=--mail-type=END)")
    name = _long(word, "--sbatch-arg", SBATCH_LONG, "sbatch")
    if name in owned:
        raise UsageError(f"--sbatch-arg {word}: ringtrain slurm writes #SBATCH --{name} itself",
                         f"pass {owned[name]}")
    return word
