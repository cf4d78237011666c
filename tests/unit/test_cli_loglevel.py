"""ringtrain's own log level: -v/-q on the command line, else LOGLEVEL (torchrun's variable),
else WARNING; a LOGLEVEL that is not a level is refused with the values it takes."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.cli.verbosity import level_from
from ringtrain.errors import UsageError


@pytest.fixture
def root_level() -> Iterator[None]:
    root = logging.getLogger()
    before = root.level
    yield
    root.setLevel(before)


@pytest.mark.parametrize(("value", "level"), [
    ("", logging.WARNING), ("debug", logging.DEBUG), ("Info", logging.INFO),
    ("WARNING", logging.WARNING), ("warn", logging.WARNING), (" error ", logging.ERROR),
    ("critical", logging.CRITICAL),
])
def test_loglevel_names_a_level_in_any_case(value: str, level: int) -> None:
    assert level_from({"LOGLEVEL": value}) == level


def test_no_loglevel_is_warning_and_the_command_line_wins() -> None:
    assert level_from({}) == logging.WARNING
    assert level_from({"LOGLEVEL": "error"}, verbose=1) == logging.INFO
    assert level_from({"LOGLEVEL": "critical"}, verbose=5) == logging.DEBUG


def test_a_bad_loglevel_names_the_variable_and_the_values() -> None:
    with pytest.raises(UsageError) as caught:
        level_from({"LOGLEVEL": "loud"}, verbose=1)
    assert "LOGLEVEL='loud'" in caught.value.message
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in caught.value.hint


@pytest.mark.usefixtures("root_level")
def test_the_command_sets_loglevel_and_a_sub_commands_v_wins() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["hosts", "-H", "a:1,b:1"], env={"LOGLEVEL": "error"})
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.ERROR
    result = runner.invoke(cli, ["hosts", "-H", "a:1,b:1", "-v"], env={"LOGLEVEL": "error"})
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.INFO


@pytest.mark.usefixtures("root_level")
def test_the_command_refuses_a_bad_loglevel_without_a_traceback() -> None:
    result = CliRunner().invoke(cli, ["hosts", "-H", "a:1"], env={"LOGLEVEL": "verbose"})
    assert result.exit_code == 2
    assert "error: LOGLEVEL='verbose' is not a log level" in result.stderr
    assert "fix: set LOGLEVEL to one of DEBUG, INFO" in result.stderr
    assert "Traceback" not in result.output
