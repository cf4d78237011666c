"""The run directory: checked once, used through its descriptor (issue 40).

Reproduces the finding: anyone who could write the runs directory (or a directory above it)
could move the 0700 run directory aside and put their own in its place, after which the
launcher wrote ``result.json`` through their ``result.json.tmp`` link (a root-owned 0600 file
overwritten) and its children ran their ``discover-hosts``. Now the directories down to the
runs directory are judged as OpenSSH's StrictModes judges them, and where the user trusts a
group to write one (``--trust-group``) a swap still reaches nothing: every write goes through
the descriptor, every child process names the files through ``/proc/<pid>/fd/<n>``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.errors import SetupError
from ringtrain.hostfile import allocate, parse_host_spec
from ringtrain.launch.job.hosts import with_ssh_defaults
from ringtrain.launch.job.run import prepare
from ringtrain.launch.job.rundir import make_run_dir
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.spec import Backend, ElasticPolicy, LaunchSpec
from ringtrain.trust import Owner, untrusted_dir

NOBODY = NOGROUP = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")

def _swap(runs: Path, run_id: str, secret: Path, marker: Path) -> None:
    """What another user does once the run directory exists: move it aside, put theirs in its
    place, with a planted program and links to a file they cannot write."""
    here = runs / run_id
    os.rename(here, runs / f"{run_id}.aside")
    for folder in (here, here / "attempt-1", here / "attempt-1" / "bin"):
        folder.mkdir()
        folder.chmod(0o777)
    for name in ("result.json.tmp", "result.json", "events.log", "launcher.json",
                 "attempt-1/rank.0.log", "attempt-1/plan.json"):
        (here / name).symlink_to(secret)
    for name in ("attempt-1/discover-hosts", "attempt-1/bin/ssh"):
        (here / name).write_text(f"#!/bin/sh\ntouch {marker}\necho localhost:1\n")
        (here / name).chmod(0o755)
    (here / "attempt-1" / "elastic-hosts").write_text("attacker:8\n")


def as_nobody(action: Callable[[], None]) -> None:
    """Run ``action`` in a child process that is ``nobody`` (group ``nogroup``), no other
    group; fail the test if it fails."""
    pid = os.fork()
    if pid == 0:  # the child: only os calls, then out without Python's teardown
        status = 1
        try:
            os.setgroups([])
            os.setgid(NOGROUP)
            os.setuid(NOBODY)
            action()
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the other user's part failed"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder another user can reach (pytest's own tmp is 0700), root's, not writable."""
    top = Path(tempfile.mkdtemp(prefix="rt-rundir-", dir="/tmp"))
    try:
        top.chmod(0o711)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_decision_for_a_directory_on_the_way() -> None:
    mine = {1000, 0}
    assert untrusted_dir(Owner(1000, 0o755, 1000), mine) is None
    assert untrusted_dir(Owner(0, 0o1777, 0), mine) is None  # /tmp: sticky
    assert untrusted_dir(Owner(1000, 0o3775, 5000), mine) is None  # sticky team directory
    assert "owned by" in (untrusted_dir(Owner(NOBODY, 0o755, 0), mine) or "")
    assert "owned by" in (untrusted_dir(Owner(NOBODY, 0o1777, 0), mine) or "")
    assert "anyone can write it" in (untrusted_dir(Owner(0, 0o777, 0), mine) or "")
    assert "can write it" in (untrusted_dir(Owner(0, 0o775, NOGROUP), mine) or "")
    assert untrusted_dir(Owner(0, 0o775, NOGROUP), mine, {NOGROUP}) is None  # trusted group
    assert "anyone" in (untrusted_dir(Owner(0, 0o777, NOGROUP), mine, {NOGROUP}) or "")


def test_a_directory_above_the_runs_directory_that_others_can_write_is_refused(
        tmp_path: Path) -> None:
    """Ancestors were never checked: a writable one lets its writers swap everything below."""
    shared = tmp_path / "shared"
    (shared / "project").mkdir(parents=True)
    shared.chmod(0o777)
    with pytest.raises(SetupError) as caught:
        make_run_dir(shared / "project" / "runs" / "r1")
    assert f"{shared} is on its way and anyone can write it" in caught.value.message
    assert f"chmod o-w {shared}" in caught.value.hint and "--runs-dir" in caught.value.hint
    assert not (shared / "project" / "runs" / "r1").exists()  # taken back
    shared.chmod(0o1777)  # sticky, as /tmp: nobody moves what is not theirs
    made = make_run_dir(shared / "project" / "runs" / "r1")
    assert stat.S_IMODE(os.stat(made.path).st_mode) == 0o700


def test_the_command_refuses_with_the_fix_and_no_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    said = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "-H", "localhost:1",
                                    "--runs-dir", str(tmp_path / "open" / "runs"), "train.py"])
    assert said.exit_code == 3 and said.exc_info is not None
    assert isinstance(said.exc_info[1], SystemExit), said.exc_info  # not a traceback
    assert f"error: the runs directory {tmp_path / 'open' / 'runs'} is not safe" in said.output
    assert f"fix: chmod o-w {tmp_path / 'open'}" in said.output


def test_a_link_on_the_way_is_walked_and_its_target_judged(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    (open_dir / "real").mkdir(parents=True)
    open_dir.chmod(0o777)
    (tmp_path / "link").symlink_to("open/real")
    with pytest.raises(SetupError, match=f"{open_dir} is on its way"):
        make_run_dir(tmp_path / "link" / "runs" / "r1")
    open_dir.chmod(0o755)
    made = make_run_dir(tmp_path / "link" / "runs" / "r1")
    assert (open_dir / "real" / "runs" / "r1").is_dir() and made.path.name == "r1"
    (tmp_path / "file").write_text("")
    with pytest.raises(SetupError, match="Not a directory"):
        make_run_dir(tmp_path / "file" / "r1")


@needs_root
def test_a_group_that_can_write_the_runs_directory_must_be_named(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, 0, NOGROUP)
    runs.chmod(0o775)
    with pytest.raises(SetupError) as caught:
        make_run_dir(runs / "r1")
    assert "group nogroup (gid 65534) can write it" in caught.value.message
    assert "--trust-group nogroup" in caught.value.hint and f"chmod g-w {runs}" in caught.value.hint
    assert make_run_dir(runs / "r1", ["nogroup"]).path == runs / "r1"
    with pytest.raises(SetupError, match="no such group"):
        make_run_dir(runs / "r2", ["no-group-by-this-name"])


@needs_root
def test_a_swapped_run_directory_is_neither_written_through_nor_run(shared: Path) -> None:
    """The group is trusted (the user said so), and one of its members swaps the run directory
    after the launcher made it: every write still lands in the launcher's own directory, no
    link is followed, and a child process reaching it through ``reach`` runs the launcher's
    discovery script, not the planted one."""
    runs = shared / "team" / "runs"
    runs.mkdir(parents=True)
    os.chown(runs, 0, NOGROUP)
    runs.chmod(0o775)
    secret = shared / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    marker = shared / "planted-ran"
    spec = LaunchSpec(script="train.py", host_spec="localhost:1", runs_dir=runs,
                      trust_groups=("nogroup",), backend=Backend.HOROVODRUN, gloo=True,
                      elastic=ElasticPolicy(), working_dir=shared)
    run_dir = make_run_dir(runs / "R1", spec.trust_groups)
    as_nobody(lambda: _swap(runs, "R1", secret, marker))
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin:/bin"}, True, "/venv/bin/python"),
                        reach=run_dir.reach)
    plan = make_plan(spec, allocate(parse_host_spec("localhost:1"), None), inputs)
    prepare(plan, run_dir)
    run_dir.write("result.json", '{"state": "succeeded"}')
    run_dir.append("events.log", "job succeeded\n")
    with run_dir.open_append("attempt-1/rank.0.log") as log:
        log.write("rank 0 says\n")
    run_dir.record_launcher()
    script = plan.reached_attempt_dir / "discover-hosts"
    found = subprocess.run([str(script)], capture_output=True, text=True, check=True, timeout=30)
    assert found.stdout == "localhost:1\n" and not marker.exists()
    assert secret.read_text() == "root's own\n"  # no link followed
    aside = runs / "R1.aside"
    assert (aside / "result.json").read_text() == '{"state": "succeeded"}'
    assert (aside / "events.log").read_text() == "job succeeded\n"
    assert (aside / "attempt-1" / "rank.0.log").read_text() == "rank 0 says\n"
    assert (aside / "attempt-1" / "plan.json").is_file() and (aside / "launcher.json").is_file()
    planted = runs / "R1"
    assert (planted / "result.json.tmp").is_symlink() and (planted / "result.json").is_symlink()
    assert all(p.lstat().st_uid == NOBODY for p in planted.rglob("*"))  # nothing of ours there
    # what is shown and recorded names the run directory, what runs names the descriptor
    discovery = "--host-discovery-script"
    shown, started = list(plan.command.argv), list(plan.started.argv)
    assert shown[shown.index(discovery) + 1] == str(runs / "R1" / "attempt-1" / "discover-hosts")
    assert started[started.index(discovery) + 1] == str(script)
    assert str(script).startswith(f"/proc/{os.getpid()}/fd/{run_dir.fd}/")


def test_what_mpirun_and_horovodruns_ssh_read_is_reached_through_the_descriptor(
        tmp_path: Path) -> None:
    """mpirun's ssh_config and hostfile, horovodrun's ssh shim (its PATH) and the config the
    shim names: all through the launcher's descriptor; plan.json keeps the run directory's
    name. Checked with the real OpenSSH (``ssh -G``) through the shim."""
    run_dir = make_run_dir(tmp_path / "runs" / "R1")
    hosts = with_ssh_defaults(parse_host_spec("gpu01:2,gpu02:2"), LaunchSpec("t.py").ssh)
    near = run_dir.reach / "attempt-1"
    ssh = shutil.which("ssh") or "/usr/bin/ssh"
    inputs = PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin:/bin"}, True, "/venv/bin/python", ssh),
                        reach=run_dir.reach)
    for backend in (Backend.MPIRUN, Backend.HOROVODRUN):
        spec = LaunchSpec(script="t.py", runs_dir=tmp_path / "runs", backend=backend,
                          working_dir=tmp_path)
        plan = make_plan(spec, allocate(hosts, None), inputs)
        prepare(plan, run_dir)
        recorded, started = plan.to_json_text(), " ".join(plan.started.argv)
        assert str(run_dir.reach) not in recorded and str(tmp_path / "runs" / "R1") in recorded
        if backend is Backend.MPIRUN:
            assert f"ssh -F {near / 'ssh_config'}" in started
            assert f"--hostfile {near / 'hostfile'}" in started
            continue
        env = dict(plan.started.env)
        assert env["PATH"].startswith(f"{near / 'bin'}:")
        assert env["RINGTRAIN_LAUNCHER_BIN"] == str(near / "bin")  # the rank entry drops it
        out = subprocess.run([str(near / "bin" / "ssh"), "-G", "gpu02"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        assert "stricthostkeychecking true" in out and "batchmode yes" in out


def test_the_rank_entry_takes_the_launchers_shim_folder_off_path(tmp_path: Path) -> None:
    """horovodrun hands its PATH, shim folder first, to every rank on every host; there the
    folder's name is not the launcher's: the entry drops it before the script runs."""
    script = tmp_path / "show.py"
    script.write_text("import os\nprint(os.environ['PATH'])\n"
                      "print(os.environ.get('RINGTRAIN_LAUNCHER_BIN'))\n")
    shim = "/proc/1/fd/3/attempt-1/bin"
    env = {"PATH": f"{shim}:/usr/bin:/bin", "RINGTRAIN_LAUNCHER_BIN": shim,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-m", "ringtrain.rank.entry", str(script)], env=env,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.splitlines() == ["/usr/bin:/bin", "None"]


def test_mpiruns_ssh_config_is_named_through_the_descriptor_up_to_open_mpis_tree_radix(
        tmp_path: Path) -> None:
    """mpirun runs its ssh here for up to 64 hosts (Open MPI's routed_radix): the config
    through the launcher's descriptor. Past that its daemons run the ssh on the hosts, where
    only the run directory's own path can name it."""
    from ringtrain.launch.plan.launchers import OMPI_TREE_RADIX

    runs = tmp_path / "runs"
    run_dir = make_run_dir(runs / "R1", ())
    for count, through in ((3, True), (OMPI_TREE_RADIX + 1, False)):
        hosts = ",".join(f"10.0.{i // 250}.{i % 250 + 1}:1" for i in range(count))
        spec = LaunchSpec(script="train.py", host_spec=hosts, runs_dir=runs)
        inputs = PlanInputs(SessionEnv("R1", {"PATH": "/usr/bin:/bin"}, True, "/venv/bin/python"),
                            reach=run_dir.reach)
        plan = make_plan(spec, allocate(parse_host_spec(hosts), None), inputs)
        argv = list(plan.started.argv)
        agent = argv[argv.index("plm_rsh_agent") + 1]
        expected = (run_dir.reach if through else runs.absolute() / "R1") / "attempt-1"
        assert agent == f"ssh -F {expected / 'ssh_config'}", (count, agent)
        assert "plm_rsh_no_tree_spawn" not in argv  # mpirun must notice a daemon lost


def test_a_rank_log_line_is_readable_as_soon_as_it_is_written(tmp_path: Path) -> None:
    """`tail -f rank.0.log` shows each line as the rank prints it, not at 8 KiB or the end."""
    run_dir = make_run_dir(tmp_path / "run")
    with run_dir.open_append("rank.0.log") as f:
        f.write("epoch 1\n")
        assert (run_dir.path / "rank.0.log").read_text() == "epoch 1\n"
