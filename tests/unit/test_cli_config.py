"""Defaults without flags: ringtrain.toml, the user's config file, RINGTRAIN_<KEY>."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for key in ("RINGTRAIN_RUNS_DIR", "RINGTRAIN_HOSTS", "RINGTRAIN_STALL_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def _dry_run(*extra: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", *extra, "train.py"],
                                env=env)
    plan = next(Path().rglob("plan.json"), None)
    data = json.loads(plan.read_text())["spec"] if plan else {}
    assert result.exit_code == 0 or not plan, result.output
    return result.exit_code, data


def test_project_file_then_user_file_then_environment_then_command_line(project: Path) -> None:
    user = project / "xdg" / "ringtrain"
    user.mkdir(parents=True)
    (user / "hosts.txt").write_text("localhost slots=2\n")  # beside the file that names it
    (user / "config.toml").write_text('hosts = "hosts.txt"\nstall_timeout = 300\n')
    (project / "ringtrain.toml").write_text('runs_dir = "from-project"\nstall_timeout = 900\n')
    code, spec = _dry_run()
    assert code == 0
    assert spec["host_spec"] is None and spec["hosts_file"] == str(user / "hosts.txt")
    assert spec["runs_dir"] == str(project / "from-project")  # the file's folder
    assert spec["supervision"]["stall_timeout"] == 900  # project beats user
    for p in Path("from-project").rglob("plan.json"):
        p.unlink()
    code, spec = _dry_run(env={"RINGTRAIN_STALL_TIMEOUT": "60"})
    assert spec["supervision"]["stall_timeout"] == 60  # environment beats the files
    for p in Path("from-project").rglob("plan.json"):
        p.unlink()
    code, spec = _dry_run("--stall-timeout", "5", env={"RINGTRAIN_STALL_TIMEOUT": "60"})
    assert spec["supervision"]["stall_timeout"] == 5  # the command line beats everything


def test_config_shows_each_value_and_its_source(project: Path) -> None:
    (project / "ringtrain.toml").write_text('runs_dir = "/scratch/runs"\n')
    result = CliRunner().invoke(cli, ["config", "--json"], env={"RINGTRAIN_HOSTS": "gpu.txt"})
    assert result.exit_code == 0, result.output
    rows = {r["key"]: r for r in json.loads(result.stdout)}
    assert rows["runs_dir"]["value"] == "/scratch/runs"
    assert rows["runs_dir"]["source"] == str(project / "ringtrain.toml")
    assert rows["hosts"]["source"] == "RINGTRAIN_HOSTS"
    assert rows["python"]["source"] == "built-in default"


def test_a_bad_config_names_the_file_key_and_fix(project: Path) -> None:
    (project / "ringtrain.toml").write_text('stall_timout = 900\n')
    result = CliRunner().invoke(cli, ["config"])
    assert result.exit_code == 2
    assert f"error: {project / 'ringtrain.toml'}: unknown key 'stall_timout' (did you mean " \
           "'stall_timeout'?)" in result.stderr
    assert "Traceback" not in result.output
    (project / "ringtrain.toml").write_text('max_restarts = "many"\n')
    result = CliRunner().invoke(cli, ["launch", "--help"])
    assert result.exit_code == 2 and "'many' is not an integer" in result.stderr
