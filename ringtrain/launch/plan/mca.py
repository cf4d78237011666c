"""The MCA parameters set outside ringtrain, and which of ringtrain's own give way. Pure.

Open MPI 4.1's mpirun refuses a parameter named twice with ``-mca`` ("MCA parameters can only be
listed once on a command line", opal/mca/base/mca_base_cmd_line.c), so ringtrain's defaults
(``pml ob1``, ``btl ^openib``, the probe's ``btl_tcp_if_include`` / ``oob_tcp_if_include``)
cannot simply come first with the user's words after them. Open MPI's own precedence is:
the command line over ``OMPI_MCA_<name>`` in the environment over the parameter files. So a
parameter the user's mpirun words set, or the launcher's environment sets, is theirs: ringtrain
leaves its own pair out (``choose``) and Open MPI sees each name once, the user's value in
force. ``btl_tcp_if_exclude`` beside an include is refused by Open MPI's tcp BTL (the two are
mutually exclusive: the ranks then cannot reach each other), so a user's exclude drops
ringtrain's include; the same for ``oob_tcp``.

Only ``plm_rsh_agent`` does not give way: it is the ssh with ringtrain's config, the host keys
the pre-flight verified. The user's words naming it are refused; the environment's is
overridden (the command line wins), and the plan says so.

horovodrun (``--mpi``) passes its own ``-mca pml ob1 -mca btl ^openib -mca btl_tcp_if_include
<nics>`` before the user's ``--mpi-args`` and cannot be told to leave them out. Open MPI 4.1
takes the same name once with ``-mca`` and once with ``-gmca`` (a global parameter), and the
ranks' MCA system has the ``-gmca`` value in force, whichever comes first (asked of the real
horovodrun and mpirun in tests/integration/test_mpi_args_sim.py, through Open MPI's own
``mpi_show_mca_params``). So under horovodrun the user's ``-mca`` of those names goes as
``-gmca``, and so does a site's ``OMPI_MCA_<name>`` (horovodrun's ``-x OMPI_MCA_<name>`` loses
to its own ``-mca``); ``-x OMPI_MCA_<name>=value`` wins over both and needs nothing.
``btl_tcp_if_exclude`` there cannot work beside horovodrun's include (Open MPI's tcp BTL
refuses both, with any include value) and is refused on more than one host, with the fix.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringtrain.errors import UsageError

ENV_PREFIX = "OMPI_MCA_"
# mpirun's options that set one MCA parameter: each takes a name and a value, as two words
# (mpirun 4.1 has no --mca=NAME form, and -mca NAME=VALUE reads NAME=VALUE as the name)
MCA_OPTIONS = ("-mca", "--mca", "-gmca", "--gmca")
GLOBAL_OPTIONS = ("-gmca", "--gmca")
# Open MPI 4.1's synonyms (ompi_info --all: "synonyms:"), read as the name they stand for
SYNONYMS = {
    "oob_tcp_include": "oob_tcp_if_include",
    "oob_tcp_exclude": "oob_tcp_if_exclude",
    "orte_rsh_agent": "plm_rsh_agent",
    "pls_rsh_agent": "plm_rsh_agent",
}
# ringtrain's parameter -> the user's parameters that replace it
YIELDS_TO = {
    "btl_tcp_if_include": ("btl_tcp_if_include", "btl_tcp_if_exclude"),
    "oob_tcp_if_include": ("oob_tcp_if_include", "oob_tcp_if_exclude"),
}
RSH_AGENT = "plm_rsh_agent"
# what horovodrun --mpi itself passes to Open MPI's mpirun with -mca (horovod/runner/
# mpi_run.py: _OMPI_FLAGS, and tcp_intf_arg, which it always has: its own interface search)
HOROVODRUN_SETS = ("pml", "btl", "btl_tcp_if_include")


def canonical(name: str) -> str:
    return SYNONYMS.get(name, name)


@dataclass(frozen=True, slots=True)
class McaWord:
    """One parameter the user's mpirun words set: ``option name value`` at words[at]
    (``option`` one of MCA_OPTIONS, or ``-x`` for ``-x OMPI_MCA_name=value``)."""

    option: str
    name: str  # canonical
    value: str
    at: int

    @property
    def text(self) -> str:
        if self.option == "-x":
            return f"-x {ENV_PREFIX}{self.name}={self.value}"
        return shlex.join((self.option, self.name, self.value))


@dataclass(frozen=True, slots=True)
class UserMca:
    """The MCA parameters set outside ringtrain: by the user's mpirun words (``--mpi-arg``)
    and by ``OMPI_MCA_<name>`` in the launcher's environment."""

    words: tuple[McaWord, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (variable, value): OMPI_MCA_<name> as set

    @classmethod
    def read(cls, mpi_args: Sequence[str], environ: Mapping[str, str]) -> UserMca:
        env = tuple(sorted((k, v) for k, v in environ.items()
                           if k.startswith(ENV_PREFIX) and len(k) > len(ENV_PREFIX)))
        return cls(words=parse_words(mpi_args), env=env)

    def word(self, *names: str) -> McaWord | None:
        """The first of the user's words that sets one of ``names``."""
        return next((w for w in self.words if w.name in names), None)

    def env_vars(self, name: str) -> tuple[str, ...]:
        """The environment's variables that set ``name`` (its synonyms' included)."""
        return tuple(k for k, _ in self.env if canonical(k[len(ENV_PREFIX):]) == name)

    def env_value(self, name: str) -> str | None:
        found = self.env_vars(name)
        return dict(self.env)[found[0]] if found else None

    def setter(self, *names: str) -> str | None:
        """What sets one of ``names`` outside ringtrain, in words, or None: the command line
        first (it wins over the environment in Open MPI)."""
        word = self.word(*names)
        if word is not None:
            return f"--mpi-arg {word.text}"
        for name in names:
            for var in self.env_vars(name):
                return f"{var}={shlex.quote(dict(self.env)[var])} in the environment"
        return None


def parse_words(words: Sequence[str]) -> tuple[McaWord, ...]:
    """The MCA parameters in the user's mpirun words: ``-mca``/``--mca``/``-gmca``/``--gmca
    NAME VALUE`` and ``-x OMPI_MCA_NAME=VALUE`` (a value for the ranks' environment, which
    Open MPI reads there as the parameter). An option with fewer than two words after it is
    refused: mpirun would take the rank command's first word as the value."""
    found: list[McaWord] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in MCA_OPTIONS:
            if i + 2 >= len(words):
                raise UsageError(
                    f"--mpi-arg {shlex.join(words[i:])}: {word} takes a parameter name and a "
                    "value, as two words",
                    f"pass {word} NAME VALUE, e.g. --mpi-args \"{word} pml ucx\"")
            found.append(McaWord(word, canonical(words[i + 1]), words[i + 2], i))
            i += 3
            continue
        if word == "-x" and i + 1 < len(words):
            name, eq, value = words[i + 1].partition("=")
            if eq and name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
                found.append(McaWord("-x", canonical(name[len(ENV_PREFIX):]), value, i))
            i += 2
            continue
        i += 1
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Choice:
    """One of the launcher's own MCA settings (ringtrain's, or horovodrun's) and what became of
    it: ``kept``, or left out / overridden because ``by`` sets the parameter."""

    name: str
    value: str
    kept: bool
    by: str = ""

    @property
    def note(self) -> str:
        return f"{self.name} {self.value} ({self.by})"


def choose(ours: Sequence[tuple[str, str]], user: UserMca) -> tuple[Choice, ...]:
    """ringtrain's ``-mca`` pairs for mpirun, each kept or left out for the user's own."""
    out = []
    for name, value in ours:
        if name == RSH_AGENT:
            word = user.word(RSH_AGENT)
            if word is not None:
                raise UsageError(
                    f"--mpi-arg {word.text}: mpirun's ssh is ringtrain's (its ssh config "
                    "checks the host keys the pre-flight verified); another agent would "
                    "bypass it",
                    "drop it; per-host ssh settings go in an ssh config: --ssh-config FILE "
                    "(or -p / -i)")
            site = user.setter(RSH_AGENT)
            out.append(Choice(name, value, kept=True, by=site or ""))
            continue
        by = user.setter(*YIELDS_TO.get(name, (name,)))
        out.append(Choice(name, value, kept=by is None, by=by or ""))
    return tuple(out)


def check_loopback(user: UserMca) -> None:
    """A ``btl_tcp_if_exclude`` replaces Open MPI's own, ``127.0.0.1/8,sppp``: without the
    loopback in it, ranks on different hosts offer each other 127.0.0.1, connect to their own
    host and hang (Open MPI's FAQ: exclude lo too). Refused where ranks span hosts."""
    by = user.setter("btl_tcp_if_exclude")
    word = user.word("btl_tcp_if_exclude")
    value = word.value if word is not None else user.env_value("btl_tcp_if_exclude") or ""
    items = [v.strip() for v in value.split(",")]
    if by is None or any(v == "lo" or v.startswith("127.") for v in items):
        return
    raise UsageError(
        f"{by}: this list replaces Open MPI's own (127.0.0.1/8,sppp), so the loopback is no "
        "longer excluded and ranks on different hosts try each other's 127.0.0.1 and hang",
        f"add lo to it: btl_tcp_if_exclude {','.join([*filter(None, items), 'lo'])}")


def kept_argv(choices: Sequence[Choice]) -> list[str]:
    return [w for c in choices if c.kept for w in ("-mca", c.name, c.value)]


def describe(choices: Sequence[Choice], launcher: str) -> list[str]:
    """The plan's lines for ``choices`` (``launcher``: mpirun or horovodrun): which of the
    launcher's own settings gave way, and which stayed over the environment's."""
    lines = []
    out = "; ".join(c.note for c in choices if not c.kept)
    if out and launcher == "horovodrun":
        lines.append("MCA settings of yours in force over horovodrun's own -mca (passed as "
                     f"-gmca, which Open MPI puts over -mca): {out}")
    elif out:
        lines.append(f"MCA settings of yours in force, ringtrain's left out: {out}")
    kept = "; ".join(c.note for c in choices if c.kept and c.by)
    if kept:
        lines.append(f"ringtrain's ssh kept over the environment's (it checks the host keys the "
                     f"pre-flight verified): {kept}")
    return lines


def for_horovodrun(mpi_args: Sequence[str], user: UserMca, *, remote: bool,
                   nics: str | None) -> tuple[tuple[str, ...], tuple[Choice, ...]]:
    """horovodrun's ``--mpi-args`` words: the user's ``-mca`` of a parameter horovodrun sets
    itself goes as ``-gmca``, and a site's ``OMPI_MCA_<name>`` of one is added as ``-gmca``
    (horovodrun's ``-x OMPI_MCA_<name>`` loses to its own ``-mca``); with the notes for the
    plan. ``nics``: the interfaces horovodrun is told (--network-interface), None: its own
    search's."""
    if remote:
        _refuse_under_horovodrun(user)
    theirs = {"pml": "ob1", "btl": "^openib", "btl_tcp_if_include": nics or "(its own search)"}
    words = list(mpi_args)
    notes = []
    for word in user.words:
        if word.name not in HOROVODRUN_SETS or word.option == "-x":
            continue
        if word.option not in GLOBAL_OPTIONS:
            words[word.at] = "-gmca"
        notes.append(Choice(word.name, theirs[word.name], kept=False,
                            by=f"--mpi-arg {word.text}"))
    named = {w.name for w in user.words}
    for name in HOROVODRUN_SETS:
        value = user.env_value(name)
        if value is not None and name not in named:
            words += ["-gmca", name, value]
            notes.append(Choice(name, theirs[name], kept=False, by=user.setter(name) or ""))
    return tuple(words), tuple(notes)


def _refuse_under_horovodrun(user: UserMca) -> None:
    word = user.word(RSH_AGENT)
    if word is not None:
        raise UsageError(
            f"--mpi-arg {word.text}: horovodrun's mpirun runs ringtrain's ssh (its ssh config "
            "checks the host keys the pre-flight verified); another agent would bypass it",
            "drop it; per-host ssh settings go in an ssh config: --ssh-config FILE (or -p / -i)")
    by = user.setter("btl_tcp_if_exclude")
    if by is not None:
        raise UsageError(
            f"{by}: horovodrun passes its own -mca btl_tcp_if_include, and Open MPI refuses "
            "both (the ranks could not reach each other)",
            "name the interface to use instead with --network-interface IFACE, or use "
            "--backend mpirun, which leaves its own include out for your exclude")
