"""Issue 42: the user's own MCA parameters (``--mpi-arg -mca NAME VALUE``, ``OMPI_MCA_NAME``).

Open MPI 4.1's mpirun refuses a parameter named twice on its command line, and puts the command
line over the environment. So ringtrain's own ``-mca`` pairs give way to the user's and the
site's: each name once, theirs in force (launch/plan/mca.py). The real mpirun's answer is asked in
tests/integration/test_mpi_args_sim.py; here the parse and the plans."""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringtrain.errors import UsageError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.plan import mca
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.mca import McaWord, UserMca, parse_words
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.spec import Backend, LaunchSpec, SshSpec

ENVIRON = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
HOSTS = "gpu01:2,gpu02:2"
NET = "10.1.2.0/24"  # the probe's choice, as make_plan gets it


def _plan(mpi_args: str = "", env: dict[str, str] | None = None, *, hosts: str = HOSTS,
          backend: Backend | None = None):  # type: ignore[no-untyped-def]
    spec = LaunchSpec(script="train.py", host_spec=hosts, working_dir=Path("/w"),
                      runs_dir=Path("/w/runs"), backend=backend,
                      mpi_args=tuple(shlex.split(mpi_args)),
                      ssh=SshSpec(config=Path("/etc/rt/ssh_config")))
    inputs = PlanInputs(SessionEnv("R1", {**ENVIRON, **(env or {})}, False, "/venv/bin/python"),
                        tcp_include=NET)
    return make_plan(spec, allocate(parse_host_spec(hosts), None), inputs)


def _mca(argv: tuple[str, ...] | list[str], options: tuple[str, ...] = ("-mca", "--mca"),
         ) -> list[tuple[str, str]]:
    """(name, value) of every ``-mca`` in mpirun's argv, as Open MPI's parser reads them."""
    return [(w.name, w.value) for w in parse_words(argv) if w.option in options]


def _once(argv: tuple[str, ...]) -> dict[str, str]:
    """mpirun's -mca parameters, checked as Open MPI 4.1 checks them: each name once."""
    pairs = _mca(argv)
    twice = [n for n, k in Counter(n for n, _ in pairs).items() if k > 1]
    assert not twice, f"mpirun refuses {twice} named twice: {shlex.join(argv)}"
    return dict(pairs)


# --- the parse -------------------------------------------------------------------------------

def test_every_spelling_of_mpiruns_mca_options_is_read() -> None:
    words = ("--report-bindings", "-mca", "pml", "ucx", "--mca", "btl", "^openib",
             "-gmca", "btl_tcp_if_include", "eth0", "--gmca", "oob_tcp_include", "eth1",
             "-x", "OMPI_MCA_coll", "^hcoll", "-x", "NCCL_DEBUG=INFO", "-x", "OMPI_MCA_pml",
             "--bind-to", "none")
    assert parse_words(words) == (
        McaWord("-mca", "pml", "ucx", 1), McaWord("--mca", "btl", "^openib", 4),
        McaWord("-gmca", "btl_tcp_if_include", "eth0", 7),
        McaWord("--gmca", "oob_tcp_if_include", "eth1", 10),  # Open MPI's synonym, read so
    )
    # -x OMPI_MCA_NAME=VALUE sets NAME in the ranks' environment; -x NAME alone forwards
    # the launcher's value (the environment rule covers it)
    assert parse_words(("-x", "OMPI_MCA_pml=ucx", "-x", "OMPI_MCA_btl")) == (
        McaWord("-x", "pml", "ucx", 0),)
    assert parse_words(("-mca", "btl", "-x")) == (McaWord("-mca", "btl", "-x", 0),)


@pytest.mark.parametrize("words", [("-mca",), ("-mca", "pml"), ("--report-bindings", "--gmca",
                                                                "btl")])
def test_an_mca_option_without_name_and_value_is_refused(words: tuple[str, ...]) -> None:
    """mpirun would take the rank command's first word (the Python) as the value."""
    with pytest.raises(UsageError, match="takes a parameter name and a value") as err:
        parse_words(words)
    assert "NAME VALUE" in err.value.hint


def test_the_environment_is_read_by_variable_and_synonym() -> None:
    user = UserMca.read((), {"OMPI_MCA_pml": "ucx", "OMPI_MCA_oob_tcp_exclude": "docker0",
                             "OMPI_MCA_": "x", "PATH": "/bin"})
    assert user.env_value("pml") == "ucx" and user.env_vars("oob_tcp_if_exclude") == (
        "OMPI_MCA_oob_tcp_exclude",)
    assert user.setter("btl") is None
    assert user.setter("pml") == "OMPI_MCA_pml=ucx in the environment"
    # the command line first: it wins over the environment in Open MPI
    both = UserMca.read(("-mca", "pml", "ob1"), {"OMPI_MCA_pml": "ucx"})
    assert both.setter("pml") == "--mpi-arg -mca pml ob1"


# --- mpirun: ringtrain's pairs give way ---------------------------------------------------------

def test_ringtrain_mca_pairs_are_all_there_when_nobody_else_sets_them() -> None:
    plan = _plan()
    assert _once(plan.command.argv) == {
        "pml": "ob1", "btl": "^openib", "plm_rsh_agent": "ssh -F /w/runs/R1/attempt-1/ssh_config",
        "btl_tcp_if_include": NET, "oob_tcp_if_include": NET}
    assert "MCA" not in plan.describe()


@pytest.mark.parametrize(("words", "env", "left_out"), [
    ("-mca btl ^openib", {}, {"btl"}),  # the README's and --help's example
    ("-mca pml ucx", {}, {"pml"}),  # InfiniBand's usual
    ("-mca pml ob1 -mca btl_tcp_if_include eth0", {}, {"pml", "btl_tcp_if_include"}),
    ("--mca btl_tcp_if_exclude docker0,lo", {}, {"btl_tcp_if_include"}),
    ("-mca oob_tcp_if_exclude docker0", {}, {"oob_tcp_if_include"}),
    ("-gmca pml ucx", {}, {"pml"}),
    ("-x OMPI_MCA_pml=ucx", {}, {"pml"}),
    ("", {"OMPI_MCA_pml": "ucx"}, {"pml"}),  # a site's choice
    ("", {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo"},
     {"btl", "btl_tcp_if_include"}),  # docs/HPC.md's Slurm simulation
    ("", {"OMPI_MCA_btl_tcp_if_exclude": "docker0,127.0.0.1/8"}, {"btl_tcp_if_include"}),
    ("-mca mpi_yield_when_idle 1 --report-bindings", {}, set()),  # ringcheck's: nothing to do
])
def test_the_users_parameter_replaces_ringtrains(words: str, env: dict[str, str],
                                                 left_out: set[str]) -> None:
    plan = _plan(words, env)
    argv = plan.command.argv
    ours = {"pml", "btl", "plm_rsh_agent", "btl_tcp_if_include", "oob_tcp_if_include"}
    # ringtrain's own pairs: those before the user's words (which follow the -x list)
    end = max(i for i, a in enumerate(argv) if a == "-x")
    assert {n for n, _ in _mca(argv[:end])} == ours - left_out
    params = _once(argv)  # and Open MPI would accept the whole line
    user = UserMca.read(shlex.split(words), env)
    for word in user.words:
        if word.option in ("-mca", "--mca"):
            assert params[word.name] == word.value  # the user's value, the only one
    # never an include beside an exclude, whoever set them
    for kind in ("btl_tcp_if", "oob_tcp_if"):
        set_ = {n for n, _ in _mca(argv, mca.MCA_OPTIONS)} | {
            mca.canonical(k[len("OMPI_MCA_"):]) for k in env} | {w.name for w in user.words}
        assert not {f"{kind}_include", f"{kind}_exclude"} <= set_, argv
    notes = "\n".join(plan.mca_notes)
    if left_out:
        assert plan.mca_notes[0].startswith("MCA settings of yours in force, ringtrain's left "
                                            "out: ")
        assert all(f"{n} " in notes for n in left_out) and notes in plan.describe()
    else:
        assert plan.mca_notes == ()


def test_the_plan_says_which_default_gave_way_and_to_what() -> None:
    plan = _plan("-mca btl_tcp_if_exclude docker0,lo", {"OMPI_MCA_pml": "ucx"})
    assert plan.mca_notes == (
        "MCA settings of yours in force, ringtrain's left out: pml ob1 (OMPI_MCA_pml=ucx in "
        "the environment); btl_tcp_if_include 10.1.2.0/24 (--mpi-arg -mca btl_tcp_if_exclude "
        "docker0,lo)",)


@pytest.mark.parametrize(("words", "env"), [("-mca btl_tcp_if_exclude docker0", {}),
                                            ("", {"OMPI_MCA_btl_tcp_if_exclude": "docker0"})])
def test_an_exclude_list_without_the_loopback_is_refused_across_hosts(
        words: str, env: dict[str, str]) -> None:
    """It replaces Open MPI's own exclusion of 127.0.0.1/8: ranks on two hosts then offer each
    other 127.0.0.1 and hang (seen on the simulated cluster with --help's old example)."""
    with pytest.raises(UsageError, match="loopback") as err:
        _plan(words, env)
    assert err.value.hint == "add lo to it: btl_tcp_if_exclude docker0,lo"
    _plan(words, env, hosts="localhost:2")  # one host: shared memory, nothing to hang
    _plan(words.replace("docker0", "docker0,127.0.0.1/8"),
          {k: "docker0,127.0.0.0/8" for k in env})


@pytest.mark.parametrize("name", ["plm_rsh_agent", "orte_rsh_agent", "pls_rsh_agent"])
def test_another_ssh_agent_is_refused_with_the_fix(name: str) -> None:
    with pytest.raises(UsageError, match="bypass") as err:
        _plan(f"-mca {name} rsh")
    assert "--ssh-config" in err.value.hint
    _plan(f"-mca {name} rsh", hosts="localhost:2")  # no ssh on local slots: nothing bypassed
    with pytest.raises(UsageError, match="bypass"):
        _plan(f"-mca {name} rsh", backend=Backend.HOROVODRUN)


def test_a_sites_ssh_agent_gives_way_to_ringtrains_and_the_plan_says_so() -> None:
    plan = _plan("", {"OMPI_MCA_plm_rsh_agent": "rsh"})
    assert _once(plan.command.argv)["plm_rsh_agent"].startswith("ssh -F ")  # cmd line wins
    assert plan.mca_notes == (
        "ringtrain's ssh kept over the environment's (it checks the host keys the pre-flight "
        "verified): plm_rsh_agent ssh -F /w/runs/R1/attempt-1/ssh_config "
        "(OMPI_MCA_plm_rsh_agent=rsh in the environment)",)


PARAMS = ("pml", "btl", "btl_tcp_if_include", "btl_tcp_if_exclude", "oob_tcp_if_include",
          "oob_tcp_include", "oob_tcp_if_exclude", "coll", "mpi_yield_when_idle")


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.tuples(st.sampled_from(mca.MCA_OPTIONS[:2]), st.sampled_from(PARAMS)),
                      max_size=4, unique_by=lambda t: mca.canonical(t[1])),
       env=st.sets(st.sampled_from(PARAMS), max_size=4),
       hosts=st.sampled_from([HOSTS, "localhost:2"]))
def test_open_mpi_is_never_given_a_name_twice(words: list[tuple[str, str]], env: set[str],
                                              hosts: str) -> None:
    """Any mix of the user's distinct parameters and a site's: each -mca name once, and
    ringtrain's include never beside an exclude set anywhere."""
    mpi_args = " ".join(f"{opt} {name} lo" for opt, name in words)
    plan = _plan(mpi_args, {f"OMPI_MCA_{n}": "lo" for n in env}, hosts=hosts)
    params = _once(plan.command.argv)
    user = {mca.canonical(n) for n in env} | {mca.canonical(n) for _, n in words}
    for kind in ("btl_tcp_if", "oob_tcp_if"):
        if f"{kind}_exclude" in user:
            assert params.get(f"{kind}_include", "lo") == "lo"  # the user's own, or none
    for name in user & {"pml", "btl", "btl_tcp_if_include", "oob_tcp_if_include"}:
        assert params.get(name, "lo") == "lo"  # theirs (the command line's) or the env's


# --- horovodrun --mpi: its own -mca cannot be left out --------------------------------------------

def _hvd_words(plan) -> list[str]:  # type: ignore[no-untyped-def]
    argv = plan.command.argv
    return shlex.split(argv[argv.index("--mpi-args") + 1]) if "--mpi-args" in argv else []


def test_horovodrun_gets_the_users_mca_of_its_own_parameters_as_gmca() -> None:
    plan = _plan("-mca pml ucx --mca btl_tcp_if_include eth0 -mca coll ^hcoll "
                 "-x OMPI_MCA_btl=tcp,self", backend=Backend.HOROVODRUN)
    assert _hvd_words(plan) == ["-gmca", "pml", "ucx", "-gmca", "btl_tcp_if_include", "eth0",
                                "-mca", "coll", "^hcoll", "-x", "OMPI_MCA_btl=tcp,self"]
    # horovodrun's own line, as horovod/runner/mpi_run.py writes it, then the user's words:
    # Open MPI would accept it (each -mca once)
    theirs = ["-mca", "pml", "ob1", "-mca", "btl", "^openib", "-mca", "btl_tcp_if_include", "x"]
    _once((*theirs, *_hvd_words(plan)))
    assert plan.mca_notes == (
        "MCA settings of yours in force over horovodrun's own -mca (passed as -gmca, which "
        "Open MPI puts over -mca): pml ob1 (--mpi-arg -mca pml ucx); btl_tcp_if_include "
        "(its own search) (--mpi-arg --mca btl_tcp_if_include eth0)",)


def test_a_sites_mca_of_horovodruns_parameters_goes_as_gmca_and_its_agent_is_unset() -> None:
    env = {"OMPI_MCA_pml": "ucx", "OMPI_MCA_coll": "^hcoll", "OMPI_MCA_plm_rsh_agent": "rsh"}
    plan = _plan("-mca btl self,tcp", env, backend=Backend.HOROVODRUN)
    assert _hvd_words(plan) == ["-gmca", "btl", "self,tcp", "-gmca", "pml", "ucx"]
    # its mpirun runs ringtrain's shim (ssh on PATH), not the site's agent
    assert plan.command.unset == ("OMPI_MCA_plm_rsh_agent",)
    assert "OMPI_MCA_plm_rsh_agent" not in plan.command.environment({**ENVIRON, **env})
    assert "secrets_by_file" not in plan.to_json()
    assert plan.mca_notes[1].startswith("ringtrain's ssh kept over the environment's")
    local = _plan("", env, hosts="localhost:2", backend=Backend.HOROVODRUN)
    assert local.command.unset == () and _hvd_words(local) == ["-gmca", "pml", "ucx"]


def test_horovodrun_refuses_an_exclude_beside_its_own_include_on_hosts() -> None:
    for words, env in (("-mca btl_tcp_if_exclude docker0", {}),
                       ("", {"OMPI_MCA_btl_tcp_if_exclude": "docker0"})):
        with pytest.raises(UsageError, match="refuses both") as err:
            _plan(words, env, backend=Backend.HOROVODRUN)
        assert "--network-interface" in err.value.hint
        assert "--backend mpirun" in err.value.hint
    # one host: the ranks meet over shared memory, the tcp BTL's refusal harms nobody
    local = _plan("-mca btl_tcp_if_exclude lo", hosts="localhost:2", backend=Backend.HOROVODRUN)
    assert _hvd_words(local) == ["-mca", "btl_tcp_if_exclude", "lo"]


# --- srun ---------------------------------------------------------------------------------------

def test_srun_leaves_a_sites_tcp_include_as_it_is() -> None:
    plan = _plan(backend=Backend.SRUN)
    assert dict(plan.command.env)["OMPI_MCA_btl_tcp_if_include"] == NET
    for env in ({"OMPI_MCA_btl_tcp_if_include": "lo"}, {"OMPI_MCA_btl_tcp_if_exclude": "lo"}):
        plan = _plan(backend=Backend.SRUN, env=env)
        assert "OMPI_MCA_btl_tcp_if_include" not in dict(plan.command.env)
        child = plan.command.environment({**ENVIRON, **env})
        assert {k: v for k, v in child.items() if k.startswith("OMPI_MCA_")} == env
