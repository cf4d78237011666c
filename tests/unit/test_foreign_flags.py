"""Other launchers' flags at ringtrain (cli/foreign_flags.py): each refused naming its tool,
ringtrain's equivalent and the corrected command line. The table is checked against Horovod's
own parser (imported) and the real mpirun's option list; torchrun and DeepSpeed are not
installed, so for them only ringtrain's side is checked."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import click
import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.cli.foreign_flags import (
    BY_FLAG,
    DEEPSPEED,
    HOROVODRUN,
    MPIRUN,
    TABLE,
    Foreign,
    markdown,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "FROM_OTHER_LAUNCHERS.md"


def _launch_takes() -> dict[str, int]:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, "launch")
    assert command is not None
    return {opt: 0 if p.is_flag or p.count else p.nargs
            for p in command.get_params(ctx) if isinstance(p, click.Option)
            for opt in (*p.opts, *p.secondary_opts)}


def _horovod_parser() -> argparse.ArgumentParser:
    launch = pytest.importorskip("horovod.runner.launch")

    class Built(Exception):
        pass

    def grab(self: argparse.ArgumentParser, *_a: object, **_k: object) -> None:
        raise Built(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", grab):
        try:
            launch.parse_args()
        except Built as built:
            parser: argparse.ArgumentParser = built.args[0]
            return parser
    raise AssertionError("horovod's parse_args built no parser")


def _arity(action: argparse.Action) -> int:
    return 1 if action.nargs is None else int(action.nargs)  # type: ignore[arg-type]


def _invoke(args: list[str], project: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LOGLEVEL", raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def test_every_equivalent_is_a_launch_option_and_no_foreign_flag_is_one() -> None:
    takes = _launch_takes()
    for entry in TABLE:
        assert entry.instead or entry.why, entry.flags
        if entry.equivalent is not None:
            assert entry.equivalent in takes, entry
            # the words parse as launch options: the value count matches what was filled in
            words = entry.words(entry.flags[0], entry.metavars)
            assert len(words) == 1 + takes[entry.equivalent], words
        for flag in entry.flags:
            assert flag not in takes, f"{flag} is ringtrain's own option: a dead table row"
    assert len(BY_FLAG) == sum(len(e.flags) for e in TABLE), "a flag listed twice"


def test_every_horovodrun_flag_is_ringtrains_own_with_its_arity_or_in_the_table() -> None:
    """The table cannot rot: a flag Horovod drops fails here, and one Horovod adds must be
    taken by ringtrain or given a row."""
    actions = _horovod_parser()._option_string_actions
    takes = _launch_takes()
    differ = {"-v", "-h", "--help"}  # ringtrain's -v is --verbose; horovodrun's is --version
    for flag, action in actions.items():
        if flag in differ:
            continue
        if flag in takes:
            assert takes[flag] == _arity(action), flag
        else:
            assert flag in BY_FLAG and HOROVODRUN in BY_FLAG[flag].tools, flag
    for entry in TABLE:
        if HOROVODRUN in entry.tools:
            for flag in entry.flags:
                assert flag in actions, f"{flag} is no horovodrun flag"
                assert _arity(actions[flag]) == entry.nargs, flag
    for alias in ("-hostfile", "--hostfile", "--num-proc", "--min-num-proc", "--max-num-proc"):
        assert alias in actions and alias in takes


@pytest.mark.parametrize("entry", [e for e in TABLE if HOROVODRUN in e.tools
                                   and e.equivalent == "--env"], ids=lambda e: e.flags[0])
def test_horovodrun_sets_the_very_variable_the_table_names(entry: Foreign) -> None:
    """horovodrun's own parser and config_parser turn the flag into the HOROVOD_* (or NCCL_*)
    variable that the row's --env sets."""
    from horovod.runner import launch
    from horovod.runner.common.util import config_parser

    flag = entry.flags[0]
    value = ("0.5" if "noise" in flag else "3") if entry.nargs else None  # noise: in [0, 1]
    argv = ["horovodrun", "-np", "2", "--autotune", flag, *([value] if value else []),
            "python", "x.py"]
    with mock.patch("sys.argv", argv):
        args = launch.parse_args()
    env: dict[str, str] = {}
    config_parser.set_env_from_args(env, args)
    name, _, want = entry.words(flag, (value,) if value else ())[1].partition("=")
    assert env[name] == want, (flag, env)


def _mpirun_options() -> dict[str, int]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    text = subprocess.run([mpirun, "--allow-run-as-root", "--help", "all"], capture_output=True,
                          text=True, timeout=60, check=False).stdout
    options: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(-[-\w|]+)((?:\s+<arg\d>)*)", line)
        if m:
            for flag in m.group(1).split("|"):
                options[flag] = m.group(2).count("<arg")
    assert "-np" in options or "--np" in options or "-n" in options, text[:400]
    return options


def test_every_mpirun_row_is_a_real_mpirun_option_with_its_arity() -> None:
    options = _mpirun_options()
    for entry in TABLE:
        if MPIRUN not in entry.tools:
            continue
        for flag in entry.flags:
            # Open MPI takes every long option with one dash too (-map-by, -bind-to)
            known = flag if flag in options else "-" + flag if "-" + flag in options else None
            assert known is not None, f"{flag} is no mpirun option"
            assert options[known] == entry.nargs, flag


@pytest.mark.parametrize(("typed", "fixed"), [
    (["--num_gpus", "2"], ["--slots", "*=2"]),
    (["--nproc_per_node=4"], ["--slots", "*=4"]),
    (["--nproc-per-node", "4"], ["--slots", "*=4"]),
    (["-x", "WANDB_MODE=offline"], ["--env", "WANDB_MODE=offline"]),
    (["-mca", "btl", "tcp,self"], ["--mpi-args", "-mca btl tcp,self"]),
    (["--mca", "btl", "tcp,self"], ["--mpi-args", "--mca btl tcp,self"]),
    (["-npernode", "2"], ["--slots", "*=2"]),
    (["--slots-per-host", "2"], ["--slots", "*=2"]),
    (["--master_addr", "10.0.0.1"], []),
    (["--standalone"], []),
    (["--num-nccl-streams", "2"], ["--env", "HOROVOD_NUM_NCCL_STREAMS=2"]),
])
def test_launch_refuses_with_the_tool_the_equivalent_and_the_corrected_line(
        project: Path, typed: list[str], fixed: list[str]) -> None:
    code, stdout, stderr = _invoke(["launch", "--dry-run", "-H", "localhost:2", *typed,
                                    "train.py", "-x", "1"], project)
    assert code == 2 and stdout == "", stderr
    entry = BY_FLAG[typed[0].partition("=")[0]]
    assert f"error: {typed[0].partition('=')[0]} is " in stderr
    assert entry.tools[0] in stderr
    line = shlex.join(["ringtrain", "launch", "--dry-run", "-H", "localhost:2", *fixed,
                       "train.py", "-x", "1"])  # the script's own -x stays
    assert stderr.rstrip().endswith(line), stderr
    assert "Did you mean" not in stderr and not list(project.glob("runs/*"))


def test_the_corrected_line_runs(project: Path) -> None:
    code, _, stderr = _invoke(["launch", "--dry-run", "--no-probe", "-H", "localhost:2",
                               "--nproc_per_node", "1", "-x", "A=1", "train.py"], project)
    assert code == 2
    line = stderr.rstrip().rpartition(": ringtrain ")[2]  # the first refusal: --nproc_per_node
    code, _, stderr = _invoke(shlex.split(line), project)
    assert code == 2 and "-x is mpirun's option" in stderr  # then the next one
    line = stderr.rstrip().rpartition(": ringtrain ")[2]
    result = CliRunner().invoke(cli, shlex.split(line))
    assert result.exit_code == 0, result.output
    assert "-np 1 " in result.output  # --slots '*=1': one rank
    assert "--env A=1" in line and "A=1" not in result.output  # a secret, by file


def test_single_dash_mpirun_words_are_not_misread_as_short_options(project: Path) -> None:
    """Without the table, click read -mca as -m ca (run module 'ca') and -host as -h (help)."""
    for typed in (["-mca", "btl", "tcp"], ["-host", "a:1"], ["-machinefile", "hf"]):
        code, stdout, stderr = _invoke(["launch", "--dry-run", *typed, "train.py"], project)
        assert code == 2 and "mpirun's option" in stderr, (typed, stderr)
        assert "Usage:" not in stdout


def test_other_commands_drop_what_they_have_no_equivalent_for(project: Path) -> None:
    code, _, stderr = _invoke(["check", "-H", "localhost:1", "-x", "A=1", "--cpu"], project)
    assert code == 2
    assert "ringtrain check has no --env; drop -x: ringtrain check -H localhost:1 --cpu" in stderr
    code, _, stderr = _invoke(["hosts", "-H", "a:4", "--num_gpus", "2"], project)
    assert code == 2 and "ringtrain hosts -H a:4 --slots '*=2'" in stderr


def test_after_the_script_and_after_double_dash_the_words_are_not_ringtrains(
        project: Path) -> None:
    code, _, stderr = _invoke(["hosts", "-H", "a:1", "--", "--num_gpus"], project)
    assert "DeepSpeed" not in stderr
    code, _, stderr = _invoke(["launch", "--dry-run", "--no-probe", "-H", "localhost:1",
                               "train.py", "--num_gpus", "2", "-mca", "x", "y"], project)
    assert code == 0, stderr


def test_json_gets_the_refusal_as_an_error_object(project: Path) -> None:
    code, stdout, _ = _invoke(["launch", "--json", "-H", "localhost:1", "--nnodes", "2",
                               "train.py"], project)
    error = json.loads(stdout)["error"]
    assert code == error["exit_code"] == 2 and error["code"] == "usage"
    assert "torchrun" in error["message"] and error["fix"].endswith(
        "ringtrain launch --json -H localhost:1 train.py")


def test_deepspeed_node_specs_in_include_and_exclude_are_named(project: Path) -> None:
    code, _, stderr = _invoke(["hosts", "-H", "w0:2,w1:2", "--include", "w0@w1:0,1"], project)
    assert code == 2 and "DeepSpeed's NODE_SPEC" in stderr
    code, _, stderr = _invoke(["hosts", "-H", "w0:2,w1:2", "--include", "w9"], project)
    assert code == 2 and "matches no host" in stderr and "DeepSpeed" not in stderr
    assert DEEPSPEED in BY_FLAG["-e"].tools


def test_the_doc_shows_the_table() -> None:
    assert markdown() in DOC.read_text(), "regenerate docs/FROM_OTHER_LAUNCHERS.md's table"
