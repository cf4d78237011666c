"""Secrets under ``--backend mpirun`` (issue 40): Open MPI ships the value of every ``-x NAME`` to
each host's ``orted`` in its launch message, over its own TCP link, in clear. So the control
token, AWS keys and ``--env`` secrets reach the hosts by the 0600 file written over ssh before
the start, and mpirun forwards the file's name (``RINGTRAIN_ENV_FILE``) instead of theirs.

Two simulated hosts: mpirun runs under strace (an ``mpirun`` first on the launcher's PATH), so
every byte it and its children write (the launch message to each orted among them) is kept.
A value that is forwarded and said plain (``--env-plain MODE=...``) must be found there: the
capture sees the launch message. The token (each rank writes the one it found to a file of
the test's), the AWS key and the ``--env`` secret must not. The ranks checked in with that
token: the launch succeeded and the launcher heard them."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.procs import run_result
from tests.integration.simnames import G1, G2
from tests.integration.test_gloo_secrets import REPO, RINGTRAIN, secrets_dir, watch_launch

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.ssh]

SHOW = """\
import hashlib, os, socket, sys

def digest(name):
    value = os.environ.get(name)
    return hashlib.sha256(value.encode()).hexdigest() if value else "-"

rank = os.environ["OMPI_COMM_WORLD_RANK"]
token = os.environ.get("RINGTRAIN_CONTROL_TOKEN", "")
fd = os.open(os.path.join(sys.argv[1], "token-" + rank), os.O_WRONLY | os.O_CREAT, 0o600)
os.write(fd, token.encode())
os.close(fd)
print("SEES", rank, socket.gethostname(), digest("MY_API_TOKEN"),
      digest("AWS_SECRET_ACCESS_KEY"), os.environ.get("MODE"), bool(token), flush=True)
"""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_mpirun_launch_message_carries_no_secret(sim_cluster: sim.SimCluster,
                                                 tmp_path: Path) -> None:
    real = shutil.which("mpirun")
    assert real is not None
    capture = tmp_path / "mpirun.strace"
    wrap = tmp_path / "wrap"
    wrap.mkdir()
    # every write of mpirun and its children (its ssh clients, its own threads), whole
    (wrap / "mpirun").write_text(
        f"#!/bin/sh\nexec strace -f -qq -e signal=none -s 1048576 -o {capture} "
        f"-e trace=write,writev,send,sendto,sendmsg {real} \"$@\"\n")
    (wrap / "mpirun").chmod(0o755)
    # the Python on the hosts (ranks, the file's writer, the reaper): this checkout's code
    (wrap / "python").write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} "$@"\n')
    (wrap / "python").chmod(0o755)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    api, aws, mode = secrets.token_hex(16), secrets.token_hex(20), secrets.token_hex(12)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": aws,
           "PATH": f"{wrap}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO),
                                                        os.environ.get("PYTHONPATH"))))}
    argv = [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "--backend", "mpirun",
            "-H", f"{G1}:1,{G2}:1", "--python", str(wrap / "python"),
            "--ssh-config", str(sim_cluster.ssh_config),
            "--known-hosts", str(sim_cluster.known_hosts),
            "--env", f"MY_API_TOKEN={api}", "--env-plain", f"MODE={mode}",
            "--env", "AWS_SECRET_ACCESS_KEY", str(script), str(tokens)]
    values = {"MY_API_TOKEN": api.encode(), "AWS_SECRET_ACCESS_KEY": aws.encode()}
    done, leaks, _, _ = watch_launch(argv, tmp_path, env, values)
    out = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, out
    assert leaks == [], "secret values on a command line:\n" + "\n".join(leaks)
    # the job ran: each rank, on its host, found every value (the token too) and checked in
    sees = {line.split()[2]: line.split()[3:] for line in done.stdout.splitlines()
            if " SEES " in f" {line}"}
    assert sees == {"0": [G1, _sha(api), _sha(aws), mode, "True"],
                    "1": [G2, _sha(api), _sha(aws), mode, "True"]}, out
    assert run_result(tmp_path)["state"] == "succeeded"
    assert "no rank called hvd.init()" in done.stderr, out  # said of ranks heard only
    token = (tokens / "token-0").read_text()
    assert len(token) == 32 and (tokens / "token-1").read_text() == token
    # what mpirun wrote: the launch message to each orted is in it (MODE's value, forwarded
    # with -x, is found), no secret is
    sent = capture.read_bytes()
    assert mode.encode() in sent, "the capture does not hold the launch message: proves nothing"
    assert token.encode() not in sent, "the control token went to the hosts in clear"
    assert api.encode() not in sent and aws.encode() not in sent
    assert b"RINGTRAIN_ENV_FILE" in sent  # the file's name went instead
    run_id = run_result(tmp_path)["run_id"]
    assert list(secrets_dir().glob(f"{run_id}-*")) == []  # removed at teardown
