"""``ringtrain completion SHELL`` prints click's script for that shell, and the command group
answers the script's call-back with sub-commands and their options."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli

MARKS = {
    "bash": "complete -o nosort -F _ringtrain_completion ringtrain",
    "zsh": "#compdef ringtrain",
    "fish": "complete --no-files --command ringtrain",
}


@pytest.mark.parametrize("shell", MARKS)
def test_each_shell_gets_its_script(shell: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell])
    assert result.exit_code == 0, result.output
    assert MARKS[shell] in result.stdout and "_RINGTRAIN_COMPLETE" in result.stdout


def test_an_unknown_shell_is_refused_with_the_choices() -> None:
    result = CliRunner().invoke(cli, ["completion", "tcsh"])
    assert result.exit_code == 2 and "'bash', 'zsh', 'fish'" in result.stderr


def _complete(words: str) -> list[str]:
    env = {"_RINGTRAIN_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    result = CliRunner().invoke(cli, [], env=env, prog_name="ringtrain")
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_the_script_call_back_completes_commands_and_options() -> None:
    assert "launch" in _complete("ringtrain la") and "completion" in _complete("ringtrain co")
    assert "--dry-run" in _complete("ringtrain launch --dr")
    assert _complete("ringtrain completion ") == ["bash", "zsh", "fish"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_sources_the_script() -> None:
    script = subprocess.run([sys.executable, "-m", "ringtrain", "completion", "bash"],
                            capture_output=True, text=True, check=True, timeout=60).stdout
    probe = subprocess.run(["bash", "-c", script + "\ncomplete -p ringtrain"],
                           capture_output=True, text=True, check=False, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert "_ringtrain_completion" in probe.stdout
