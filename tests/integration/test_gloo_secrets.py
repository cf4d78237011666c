"""Secrets under ``--backend horovodrun --gloo`` (issue 23): horovodrun --gloo writes its whole
environment onto each rank's ``sh -c`` / ``ssh`` command line, readable by anyone in ``ps``. So
ringtrain hands it the secrets' names only; their values reach the ranks through a file only
the user can read, written on every host before the job and removed at teardown.

While the job runs, every process's command line on this machine is read (the simulated hosts
share this machine's PID namespace too): no secret value may be in any of them. The launcher
and its ranks run this checkout's code (PYTHONPATH), not whichever one the venv installed."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import secrets
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.rank import envvars, secretfile
from tests.integration.procs import killed_on_failure, run_result
from tests.integration.simnames import G1, G2

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]
RINGTRAIN = [sys.executable, "-m", "ringtrain"]

SHOW = """\
import hashlib, os, socket, time

def digest(name):
    value = os.environ.get(name)
    return hashlib.sha256(value.encode()).hexdigest() if value else "-"

time.sleep(4)  # long enough for the test to read every command line meanwhile
print("SEES", os.environ["HOROVOD_RANK"], socket.gethostname(), digest("MY_API_TOKEN"),
      digest("AWS_SECRET_ACCESS_KEY"), bool(os.environ.get("RINGTRAIN_CONTROL_TOKEN")),
      flush=True)
"""
_TOKEN_ON_A_LINE = re.compile(rb"RINGTRAIN_CONTROL_TOKEN=[^\s'\"]")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def secrets_dir() -> Path:
    """Where the secrets files go: the user's home from the password database."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ringtrain" / "secrets"


def scan_command_lines(values: dict[str, bytes], skip: int) -> tuple[list[str], list[str]]:
    """(command lines holding a secret, command lines of ringtrain ranks) of every process on
    this machine but ``skip`` (the launcher, whose own argv carries ``--env NAME=VALUE``).
    A leak names the secret, not its value."""
    leaks, ranks = [], []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == skip:
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        held = [name for name, value in values.items() if value in raw]
        held += ["the control token"] if _TOKEN_ON_A_LINE.search(raw) else []
        if held:
            shown = raw.replace(b"\0", b" ")[:60].decode(errors="replace")
            leaks.append(f"pid {entry.name} ({shown}...) holds {', '.join(held)}")
        if b"ringtrain.rank.entry" in raw and b"show.py" in raw:
            ranks.append(entry.name)
    return leaks, ranks


def _modes(directory: Path) -> dict[str, int]:
    out = {}
    for path in directory.iterdir():
        try:
            out[path.name] = path.lstat().st_mode & 0o7777
        except OSError:  # removed meanwhile
            continue
    return out


def watch_launch(argv: list[str], cwd: Path, env: dict[str, str],
                 values: dict[str, bytes]) -> tuple[subprocess.CompletedProcess[str], list[str],
                                                      set[str], dict[str, int]]:
    """Run the launcher, reading every command line on this machine until it ends: the
    result, the leaking command lines, the rank PIDs seen, the modes of secrets files seen."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    leaks: list[str] = []
    ranks: set[str] = set()
    modes: dict[str, int] = {}
    with killed_on_failure(proc):
        deadline = time.monotonic() + 240
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the launch did not end in 240 s"
            found, seen = scan_command_lines(values, proc.pid)
            leaks += [f for f in found if f not in leaks]
            ranks.update(seen)
            if seen and secrets_dir().is_dir():
                modes.update(_modes(secrets_dir()))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), leaks, ranks, modes


def check_secret_run(tmp_path: Path, argv: list[str], env: dict[str, str],
                     hosts: dict[str, str]) -> None:
    """Launch ``argv`` (``show.py``; ``hosts``: rank -> host name) with the secrets MY_API_TOKEN
    (--env NAME=VALUE) and AWS_SECRET_ACCESS_KEY (the launcher's environment, forwarded with
    --env NAME: no checkpoint on S3 would need it), and check the
    whole story: no value on any command line, every rank sees them all, its file was 0600
    while the job ran and is gone after."""
    api, aws = secrets.token_hex(16), secrets.token_hex(20)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    argv = [*argv, "--env", f"MY_API_TOKEN={api}", "--env", "AWS_SECRET_ACCESS_KEY",
            str(script)]
    env = {**env, "AWS_SECRET_ACCESS_KEY": aws}
    values = {"MY_API_TOKEN": api.encode(), "AWS_SECRET_ACCESS_KEY": aws.encode()}
    done, leaks, ranks, modes = watch_launch(argv, tmp_path, env, values)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(ranks) >= len(hosts), "the ranks were never seen: the scan proves nothing"
    assert leaks == [], "secret values on a command line:\n" + "\n".join(leaks)
    # every rank sees every value, as it did when horovodrun carried them
    sees = {line.split()[2]: line.split()[3:] for line in done.stdout.splitlines()
            if " SEES " in f" {line}"}
    assert sees == {r: [h, _sha(api), _sha(aws), "True"] for r, h in hosts.items()}, (
        done.stdout[-2000:] + done.stderr[-2000:])
    assert run_result(tmp_path)["state"] == "succeeded"
    # said only of ranks that checked in with the control token they found in the file
    assert "no rank called hvd.init()" in done.stderr, done.stderr[-2000:]
    run_id = run_result(tmp_path)["run_id"]
    mine = {name: mode for name, mode in modes.items() if name.startswith(f"{run_id}-")}
    assert mine == {f"{run_id}-1.json": 0o600}, modes
    left = list(secrets_dir().glob(f"{run_id}-*")) if secrets_dir().is_dir() else []
    assert left == []


def _this_checkout(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO),
                                                               env.get("PYTHONPATH"))))}


def test_gloo_secrets_stay_off_every_command_line(tmp_path: Path) -> None:
    argv = [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "--backend",
            "horovodrun", "--gloo", "-H", "localhost:2"]
    host = os.uname().nodename
    check_secret_run(tmp_path, argv, _this_checkout(dict(os.environ)), {"0": host, "1": host})


@pytest.mark.ssh
def test_gloo_secrets_reach_other_hosts_by_file_only(sim_cluster: sim.SimCluster,
                                                     tmp_path: Path) -> None:
    """Two simulated hosts over SSH: the file goes to each through ringtrain's SSH seam (the
    values on stdin), the ranks start through horovodrun's own ssh, which is ringtrain's shim
    with the cluster's ssh config and known hosts (--ssh-config, --known-hosts). The hosts
    share this machine's file system: each finds the file another wrote."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the Python on the hosts (ranks, the file's writer, the reaper): this checkout's code
    (bin_dir / "python").write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} "$@"\n')
    (bin_dir / "horovodrun").symlink_to(Path(sys.executable).parent / "horovodrun")
    (bin_dir / "python").chmod(0o755)
    env = _this_checkout(dict(os.environ))
    argv = [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "--backend",
            "horovodrun", "--gloo", "-H", f"{G1}:1,{G2}:1", "--python", str(bin_dir / "python"),
            "--ssh-config", str(sim_cluster.ssh_config),
            "--known-hosts", str(sim_cluster.known_hosts)]
    check_secret_run(tmp_path, argv, env, {"0": G1, "1": G2})


def test_the_writer_the_rank_and_the_reaper_on_one_host(tmp_path: Path) -> None:
    """The three programs on a host, as the launcher runs them: the writer takes the values on
    stdin; a rank takes them from the file, or stops at once with the reason when the file is
    not safe; the reaper's teardown removes it."""
    run_id, value = f"t{secrets.token_hex(4)}", secrets.token_hex(8)
    path = secretfile.path_for(run_id, 1)
    env = _this_checkout({k: v for k, v in os.environ.items() if not k.startswith("RINGTRAIN_")})
    script = tmp_path / "one.py"
    script.write_text("import hashlib, os\n"
                      "print(hashlib.sha256(os.environ['MY_API_TOKEN'].encode()).hexdigest())\n")

    def run(*argv: str, data: bytes | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", *argv], input=data and data.decode(),
                              env={**env, envvars.ENV_FILE: path}, capture_output=True,
                              text=True, timeout=60, check=False)

    try:
        stored = run("ringtrain.rank.secretfile", "--store", path,
                     data=json.dumps({"MY_API_TOKEN": value}).encode())
        assert stored.returncode == 0, stored.stderr
        written = secrets_dir() / f"{run_id}-1.json"
        assert stat.S_IMODE(written.lstat().st_mode) == 0o600
        ok = run("ringtrain.rank.entry", str(script))
        assert (ok.returncode, ok.stdout) == (0, _sha(value) + "\n"), ok.stderr
        written.chmod(0o640)
        refused = run("ringtrain.rank.entry", str(script))
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr == (f"ringtrain: cannot take the secrets from their file on "
                                  f"{os.uname().nodename}: {path} has mode 0640, not 0600; "
                                  "refused\n")
        reaped = run("ringtrain.rank.reaper", run_id, "--kill")
        assert json.loads(reaped.stdout)["secrets_removed"] == 1, reaped.stderr
        assert not written.exists()
    finally:
        secretfile.remove_run(run_id)
