"""`ringtrain launch` argument handling: user mistakes give error + fix lines, never tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["-H", "gpu01:2,gpu01:2"], 2, "listed twice"),
        (["-H", "gpu01:zero"], 2, "'zero'"),
        (["-H", "gpu;rm -rf /:2"], 2, "characters not allowed in host names"),
        (["-H", "localhost:2", "-np", "3"], 2, "asked for 3 ranks"),
        (["-H", "localhost:2", "--env", "9X=1"], 2, "not a valid environment variable name"),
        (["--gloo", "-H", "localhost:2"], 2, "--gloo needs the horovodrun backend"),
    ],
)
def test_user_mistakes_are_clear_errors(
    script: Path, args: list[str], code: int, needle: str
) -> None:
    exit_code, output = _invoke("launch", "--dry-run", *args, str(script))
    assert exit_code == code, output
    assert needle in output
    assert "fix:" in output
    assert "Traceback" not in output


def test_missing_script(tmp_path: Path) -> None:
    exit_code, output = _invoke(
        "launch", "--dry-run", "-H", "localhost:1", str(tmp_path / "nope.py")
    )
    assert exit_code == 2 and "not found" in output and "fix:" in output


def test_dry_run_prints_plan_and_writes_hostfile(script: Path, tmp_path: Path) -> None:
    exit_code, output = _invoke(
        "launch",
        "--dry-run",
        "--runs-dir",
        str(tmp_path / "runs"),
        "-H",
        "localhost:2",
        str(script),
        "--lr",
        "0.1",
    )
    assert exit_code == 0, output
    assert "localhost slots=2" in output
    assert any(line.endswith(f"{script} --lr 0.1") for line in output.splitlines())
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "attempt-1" / "hostfile").read_text() == "localhost slots=2\n"
    assert (run_dir / "attempt-1" / "plan.json").is_file()


def test_help_teaches() -> None:
    exit_code, output = _invoke("launch", "--help")
    assert exit_code == 0
    assert "--dry-run" in output and "Examples:" in output and "ringtrain launch" in output


def _group_help(name: str) -> list[tuple[str, ...]]:
    group = cli.get_command(None, name)  # type: ignore[arg-type]
    subs = getattr(group, "commands", {})
    return [(name,)] + [(name, sub) for sub in subs]


@pytest.mark.parametrize("path", [p for name in cli.list_commands(None) for p in _group_help(name)])  # type: ignore[arg-type]
def test_every_help_renders_without_escapes_showing(path: tuple[str, ...]) -> None:
    exit_code, output = _invoke(*path, "--help")
    assert exit_code == 0, output
    assert "\\b" not in output and "\\\\" not in output, output  # click's \b marker, doubled \
    assert "Usage: " in output


@pytest.mark.parametrize(
    ("args", "hostfile"),
    [
        (["--exclude", "gpu02"], "gpu01 slots=4\ngpu03 slots=4\n"),
        (["--include", "gpu0[2-3]", "-np", "5"], "gpu02 slots=4\ngpu03 slots=1\n"),
        (["--slots", "gpu0*=1"], "gpu01 slots=1\ngpu02 slots=1\ngpu03 slots=1\n"),
        (["-np", "6", "--min-hosts", "2"], "gpu01 slots=4\ngpu02 slots=2\n"),
    ],
)
def test_launch_applies_the_allocation_policy(
    script: Path, tmp_path: Path, args: list[str], hostfile: str
) -> None:
    exit_code, output = _invoke("launch", "--dry-run", "--no-probe", "--runs-dir",
                                str(tmp_path / "runs"), "-H", "gpu01:4,gpu02:4,gpu03:4", *args,
                                str(script))
    assert exit_code == 0, output
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "attempt-1" / "hostfile").read_text() == hostfile


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-np", "4", "--min-hosts", "2"], "4 ranks fill only 1 host(s), --min-hosts is 2"),
        (["--exclude", "gpu09"], "--exclude 'gpu09' matches no host"),
        (["--include", "gpu01", "-np", "8"], "asked for 8 ranks, 4 slots left"),
    ],
)
def test_allocation_mistakes_are_said_before_any_ssh(
    script: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    # no --no-probe: the hosts do not exist, so reaching the probe would fail differently
    exit_code, output = _invoke("launch", "--dry-run", "--runs-dir", str(tmp_path / "runs"),
                                "-H", "gpu01:4,gpu02:4,gpu03:4", *args, str(script))
    assert exit_code == 2 and needle in output, output
