"""Config files and discovery scripts that another user can write are not trusted (issue 23).

Reproduces the finding: a ``ringtrain.toml`` owned by ``nobody`` in a shared parent directory
named a discovery script (``hosts``), and ``ringtrain launch --dry-run`` ran it as root.

Issue 40: trust was decided by ``os.stat(path)`` and the file read (or run) again by path, so
a link flipped between a root-owned file and ``nobody``'s got nobody's ``python`` and
``hosts`` accepted (670 of 84,000 loads); the discovery script, ``env_file`` and ``launch
--from``'s plan.json the same. The flip tests below play that while loads run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.assembly import settings
from ringtrain.assembly.entry_kind import read_run_spec
from ringtrain.cli import cli
from ringtrain.errors import InventoryError, UsageError
from ringtrain.hostfile import load_inventory
from ringtrain.trust import Owner, untrusted_file

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project below a shared directory; the environment names no config of its own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for key in list(os.environ):
        if key.startswith("RINGTRAIN_"):
            monkeypatch.delenv(key)
    project = tmp_path / "shared" / "project"
    project.mkdir(parents=True)
    (project / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(project)
    return tmp_path / "shared"


def _evil_script(folder: Path, marker: Path) -> Path:
    script = folder / "discover.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho localhost:2\n")
    script.chmod(0o755)
    return script


def test_the_decision_from_owner_and_mode() -> None:
    assert untrusted_file(Owner(1000, 0o644), 1000) is None
    assert untrusted_file(Owner(0, 0o600), 1000) is None  # root's file
    assert "owned by" in (untrusted_file(Owner(NOBODY, 0o644), 1000) or "")
    assert "writable by its group" in (untrusted_file(Owner(1000, 0o664), 1000) or "")
    assert "writable by its group" in (untrusted_file(Owner(0, 0o646), 0) or "")


@needs_root
def test_a_config_file_owned_by_another_user_runs_nothing(shared: Path) -> None:
    marker = shared / "ran-as-root"
    script = _evil_script(shared, marker)
    os.chown(script, NOBODY, NOBODY)
    toml = shared / "ringtrain.toml"
    toml.write_text(f'hosts = "{script}"\npython = "/tmp/evil-python"\n')
    os.chown(toml, NOBODY, NOBODY)
    result = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "train.py"])
    assert not marker.exists(), "the discovery script of an untrusted config file ran"
    assert f"skipped {toml}" in result.output and "owned by" in result.output
    assert "/tmp/evil-python" not in result.output


@needs_root
def test_a_group_writable_config_file_is_skipped_and_config_says_why(shared: Path) -> None:
    toml = shared / "project" / "ringtrain.toml"
    toml.write_text('runs_dir = "elsewhere"\n')
    toml.chmod(0o664)
    os.chown(toml, -1, NOBODY)  # a group others are in (not the owner's private group)
    loaded = settings.load(Path.cwd(), os.environ)
    assert "runs_dir" not in loaded.settings
    assert [s.path for s in loaded.skipped] == [toml]
    shown = CliRunner().invoke(cli, ["config"])
    assert f"skipped {toml}: it is writable by its group" in shown.output
    assert "chmod go-w" in shown.output


@needs_root
def test_the_search_stops_at_a_directory_owned_by_another_user(shared: Path) -> None:
    (shared / "ringtrain.toml").write_text('runs_dir = "elsewhere"\n')  # root's own file
    os.chown(shared, NOBODY, NOBODY)  # ... in a directory nobody owns: they could swap it
    try:
        loaded = settings.load(Path.cwd(), os.environ)
    finally:
        os.chown(shared, 0, 0)
    assert "runs_dir" not in loaded.settings
    assert loaded.skipped and "directory is owned by" in loaded.skipped[0].reason


def test_the_search_stops_at_the_repository_root_and_home(shared: Path) -> None:
    (shared / "ringtrain.toml").write_text('runs_dir = "elsewhere"\n')
    (shared / "project" / ".git").mkdir()
    assert "runs_dir" not in settings.load(Path.cwd(), os.environ).settings
    (shared / "project" / ".git").rmdir()
    assert "runs_dir" in settings.load(Path.cwd(), os.environ).settings
    env = {**os.environ, "HOME": str(shared / "project")}
    assert "runs_dir" not in settings.load(Path.cwd(), env).settings


def test_keys_that_run_code_only_from_the_users_own_file(shared: Path) -> None:
    toml = shared / "project" / "ringtrain.toml"
    owner = os.stat(toml.parent).st_uid
    toml.write_text('python = "/opt/py"\nssh_config = "cfg"\nstall_timeout = 90\n')
    os.chmod(toml, 0o644)
    mine = settings.load(Path.cwd(), os.environ, uid=owner)
    assert mine.settings["python"].value == "/opt/py" and not mine.skipped
    if owner != 0:
        pytest.skip("the file must be root's for the second half")
    theirs = settings.load(Path.cwd(), os.environ, uid=1000)  # a user reading root's file
    assert "python" not in theirs.settings and "ssh_config" not in theirs.settings
    assert theirs.settings["stall_timeout"].value == 90
    assert theirs.skipped[0].keys == ("python", "ssh_config")


@needs_root
def test_a_discovery_script_another_user_can_change_is_refused(shared: Path) -> None:
    marker = shared / "ran"
    script = _evil_script(shared, marker)
    os.chown(script, NOBODY, NOBODY)
    with pytest.raises(InventoryError, match="refusing to run the discovery script") as err:
        load_inventory(str(script))
    assert "chown" in err.value.hint and not marker.exists()
    os.chown(script, 0, 0)
    script.chmod(0o777)
    with pytest.raises(InventoryError, match="writable by its group or by others"):
        load_inventory(str(script))
    script.chmod(0o755)
    assert load_inventory(str(script)).total_slots == 2 and marker.exists()


def test_run_directories_are_private_and_never_reached_through_a_link(tmp_path: Path) -> None:
    """Issue 23: run directories were world-readable and followed links."""
    from ringtrain.errors import SetupError
    from ringtrain.launch.job.rundir import make_run_dir

    runs = tmp_path / "runs"
    make_run_dir(runs / "r1")
    assert (os.stat(runs / "r1").st_mode & 0o777) == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runs / "r2").symlink_to(elsewhere)  # planted where the next run's directory goes
    with pytest.raises(SetupError, match="is a link"):
        make_run_dir(runs / "r2")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, no sticky bit
    with pytest.raises(SetupError, match="anyone can write it"):
        make_run_dir(shared / "r3")
    shared.chmod(0o1777)
    make_run_dir(shared / "r3")


@needs_root
def test_a_runs_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    from ringtrain.errors import SetupError
    from ringtrain.launch.job.rundir import make_run_dir

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "runs").symlink_to(theirs)
    with pytest.raises(SetupError, match="owned by nobody"):
        make_run_dir(tmp_path / "runs" / "r1")


def _dry(tmp: Path, *args: str) -> object:
    return CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "--runs-dir",
                                    str(tmp / "runs"), *args])


def test_launch_from_validates_plan_json_and_shows_what_it_asks(shared: Path) -> None:
    """Issue 23: `launch --from` took plan.json as it was (env names, credentials in URLs,
    python), though a plan.json is a file someone else may have written. It now goes through
    the same checks as the command line, must be the user's own, and what it asks beyond a
    plain launch is shown before anything runs."""
    tmp = shared / "project"
    first = _dry(tmp, "-H", "localhost:2", "--mpi-arg=--display-map", "--env-plain", "MODE=fast",
                 "train.py")
    assert first.exit_code == 0, first.output
    (run,) = (tmp / "runs").iterdir()
    plan = run / "attempt-1" / "plan.json"
    again = CliRunner().invoke(cli, ["launch", "--from", str(run), "--dry-run"])
    assert again.exit_code == 0, again.output
    assert 'mpi_args: ["--display-map"]' in again.output and "host_spec" in again.output
    data = json.loads(plan.read_text())
    for field, value, needle in (
            ("env", [{"name": "BAD NAME", "value": "x"}], "not a valid environment variable"),
            ("python", "python; rm -rf ~", "has characters that are not allowed"),
            ("checkpoint", {"protocol": "s3", "root": "b", "host": "u:pw@x", "port": None},
             "credentials")):
        bad = {**data, "spec": {**data["spec"], field: value}}
        plan.write_text(json.dumps(bad))
        refused = CliRunner().invoke(cli, ["launch", "--from", str(run), "--dry-run"])
        assert refused.exit_code != 0 and needle in refused.output, (field, refused.output)
    plan.write_text(json.dumps(data))
    plan.chmod(0o666)
    refused = CliRunner().invoke(cli, ["launch", "--from", str(run), "--dry-run"])
    assert refused.exit_code == 2 and "writable by its group or by others" in refused.output


# Switches ``link`` between two targets as fast as it can (os.replace: always one of them)
# for the given seconds, in a process of its own: truly beside the loads, not between them.
FLIPPER = """
import os, sys, time
link, a, b, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for target in (a, b):
        os.symlink(target, link + ".new")
        os.replace(link + ".new", link)
        n += 1
print(n)
"""


@contextlib.contextmanager
def _flipping(link: Path, mine: str, theirs: str, seconds: float = 1.5) -> Iterator[
        subprocess.Popen[str]]:
    link.symlink_to(mine)
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(link), mine, theirs,
                                str(seconds)], stdout=subprocess.PIPE, text=True)
    try:
        yield flipper
    finally:
        out, _ = flipper.communicate(timeout=30)
    assert int(out) > 100, "the link hardly switched: the test proves nothing"


@needs_root
def test_a_config_link_flipped_to_another_users_file_never_gets_theirs_read(
        shared: Path) -> None:
    project = shared / "project"
    (project / "mine.toml").write_text('python = "/opt/mine/python"\nhosts = "gpu01:4"\n')
    theirs = project / "theirs.toml"
    theirs.write_text('python = "/tmp/evil-python"\nhosts = "evil:8"\n')
    os.chown(theirs, NOBODY, NOBODY)
    seen: Counter[str] = Counter()
    with _flipping(project / "ringtrain.toml", "mine.toml", "theirs.toml") as flipper:
        while flipper.poll() is None:
            loaded = settings.load(project, os.environ)
            values = {k: s.value for k, s in loaded.settings.items()}
            if values:
                assert values == {"python": "/opt/mine/python", "hosts": "gpu01:4"}, values
                seen["mine read"] += 1
            else:
                (skipped,) = loaded.skipped
                assert "owned by nobody" in skipped.reason
                seen["theirs skipped"] += 1
    assert seen["mine read"] and seen["theirs skipped"], seen


@needs_root
def test_an_env_file_link_flipped_to_another_users_file_never_gets_theirs_read(
        shared: Path) -> None:
    project = shared / "project"
    (project / "ringtrain.toml").write_text('env_file = "ranks.env"\n')
    (project / "mine.env").write_text("MODE=fast\n")
    theirs = project / "theirs.env"
    theirs.write_text("LD_PRELOAD=/tmp/evil.so\n")
    os.chown(theirs, NOBODY, NOBODY)
    seen: Counter[str] = Counter()
    with _flipping(project / "ranks.env", "mine.env", "theirs.env") as flipper:
        while flipper.poll() is None:
            env = settings.load(project, os.environ).env
            names = [e.spec.name for e in env]
            assert names in (["MODE"], []), names
            seen["mine read" if names else "theirs skipped"] += 1
    assert seen["mine read"] and seen["theirs skipped"], seen


@needs_root
def test_a_plan_json_link_flipped_to_another_users_file_never_gets_theirs_launched(
        shared: Path) -> None:
    tmp = shared / "project"
    assert _dry(tmp, "-H", "localhost:2", "train.py").exit_code == 0
    (run,) = (tmp / "runs").iterdir()
    plan = run / "attempt-1" / "plan.json"
    data = json.loads(plan.read_text())
    plan.rename(plan.with_name("mine.json"))
    theirs = plan.with_name("theirs.json")
    theirs.write_text(json.dumps({**data, "spec": {**data["spec"],
                                                   "python": "/tmp/evil-python"}}))
    os.chown(theirs, NOBODY, NOBODY)
    seen: Counter[str] = Counter()
    with _flipping(plan, "mine.json", "theirs.json") as flipper:
        while flipper.poll() is None:
            try:
                spec = read_run_spec(run)
            except UsageError as err:
                assert "owned by nobody" in err.message, err.message
                seen["theirs refused"] += 1
                continue
            assert spec.python != "/tmp/evil-python"
            seen["mine read"] += 1
    assert seen["mine read"] and seen["theirs refused"], seen


@needs_root
def test_the_discovery_script_run_is_the_one_judged(shared: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the check and the start, nobody's script is renamed over the root-owned one
    that was judged: the script that runs is still the one judged (through its descriptor),
    where it used to be nobody's, run by path."""
    from ringtrain.hostfile import discover

    marker = shared / "theirs-ran"
    script = shared / "project" / "discover.sh"
    script.write_text("#!/bin/sh\necho gpu01:2\n")
    script.chmod(0o755)
    theirs = _evil_script(shared, marker)
    os.chown(theirs, NOBODY, NOBODY)
    started = subprocess.Popen

    def swap_then_start(*args: object, **kwargs: object) -> object:
        os.replace(theirs, script)  # after the judging, before the start
        return started(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(discover.subprocess, "Popen", swap_then_start)
    assert load_inventory(str(script)).names == ("gpu01",)
    assert not marker.exists(), "the script run was not the script judged"
    assert os.stat(script).st_uid == NOBODY  # the swap did happen


def test_a_folder_others_can_write_ends_the_search(shared: Path) -> None:
    """A directory that others can write (sticky or not) ends the upward search: anyone
    could put a ringtrain.toml there, or a link to one; a config file in it is skipped."""
    (shared / "ringtrain.toml").write_text('runs_dir = "elsewhere"\n')
    for mode in (0o777, 0o1777):
        shared.chmod(mode)
        loaded = settings.load(Path.cwd(), os.environ)
        assert "runs_dir" not in loaded.settings
        (skipped,) = loaded.skipped
        assert "its directory is writable by anyone" in skipped.reason
        assert f"chmod go-w {shared}" in skipped.fix(os.geteuid())
    shared.chmod(0o755)
    assert "runs_dir" in settings.load(Path.cwd(), os.environ).settings
