"""--ssh-transport openssh without a network: the ssh argv (pure), ssh's exit-255 messages read
into per-host errors (pure, on messages OpenSSH 9.2 printed), and OpenSshRemote's process
handling with a stand-in ``ssh`` that runs the command here: stdin, exit codes, the output cap,
a timeout that kills that ssh's process group and nothing else. (Real sshd:
tests/integration/test_openssh_sshd.py.)"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain.errors import RemoteError
from ringtrain.hostfile.model import Host
from ringtrain.remote import InputRemote, openssh, ssh
from ringtrain.remote.openssh import OpenSshRemote
from ringtrain.remote.sshcli import SshClient, describe_failure, path_problem, ssh_argv

HOST = Host("gpu01", 4)


# --------------------------------------------------------------------------- argv


def test_argv_defaults_are_strict_batch_and_the_command_is_one_quoted_word() -> None:
    argv = ssh_argv(SshClient(), HOST, ["printf", "%s|", "a b", "it's", "$HOME"])
    assert argv == ("ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                    "-o", "ConnectTimeout=5", "--", "gpu01",
                    "printf '%s|' 'a b' 'it'\"'\"'s' '$HOME'")
    assert shlex.split(argv[-1]) == ["printf", "%s|", "a b", "it's", "$HOME"]


def test_argv_with_every_setting() -> None:
    client = SshClient(Path("/etc/rt/ssh config"), Path("/etc/rt/known 100%"), accept_new=True,
                       connect_timeout=2.5, program="/usr/bin/ssh")
    host = Host("gpu02", 8, user="svc", port=2222, identity_file="/k/id_%u")
    assert ssh_argv(client, host, ["true"]) == (
        "/usr/bin/ssh", "-F", "/etc/rt/ssh config", "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", 'UserKnownHostsFile="/etc/rt/known 100%%"', "-o", "ConnectTimeout=3",
        "-p", "2222", "-l", "svc", "-i", "/k/id_%%u", "-o", "IdentitiesOnly=yes",
        "--", "gpu02", "true")


def test_paths_ssh_cannot_take_are_named() -> None:
    assert path_problem("/a/b c", "known_hosts") is None
    problem = path_problem('/a/"b', "known_hosts")
    assert problem is not None and "known_hosts '/a/\"b'" in problem and "plain path" in problem


# --------------------------------------------------------------------------- exit 255

CHANGED = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
The fingerprint for the ED25519 key sent by the remote host is
SHA256:ZszFMurfCjO+S9qsO3nkfZtN/7pp5gJR/DLR18EdKUg.
Please contact your system administrator.
Add correct host key in /root/.ssh/known_hosts to get rid of this message.
Offending ED25519 key in /root/.ssh/known_hosts:3
  remove with:
  ssh-keygen -f "/root/.ssh/known_hosts" -R "[gpu01]:2222"
Host key for [gpu01]:2222 has changed and you have requested strict checking.
Host key verification failed.
"""
REVOKED = """\
@       WARNING: REVOKED HOST KEY DETECTED!               @
The ED25519-CERT host key for [gpu01]:22931 is marked as revoked.
Host key verification failed.
"""


@pytest.mark.parametrize(("stderr", "expected"), [
    (CHANGED, "host key for gpu01 CHANGED (possible MITM): fix known_hosts: the server offers "
     "ED25519 SHA256:ZszFMurfCjO+S9qsO3nkfZtN/7pp5gJR/DLR18EdKUg, /root/.ssh/known_hosts line "
     "3 has another; if the host was reinstalled run `ssh-keygen -f /root/.ssh/known_hosts -R "
     "'[gpu01]:2222'`"),
    ("No ED25519 host key is known for [gpu01]:2222 and you have requested strict checking.\n"
     "Host key verification failed.\n",
     "unknown host key for gpu01 (ED25519): add it with `ssh-keyscan -p 2222 gpu01 >> "
     "/kh` after checking the fingerprint, or pass --accept-new-host-keys"),
    (REVOKED, "host key for gpu01 is marked @revoked in known_hosts: the host needs a new key "
     "(and a new known_hosts line), or pass --exclude gpu01"),
    ("Certificate invalid: name is not a listed principal\nNo ED25519 host key is known for "
     "gpu01 and you have requested strict checking.\nHost key verification failed.\n",
     "host certificate of gpu01 refused (name is not a listed principal): sign the host key "
     "again with the name ssh connects to among its principals (ssh-keygen -s CA -h -n gpu01), "
     "or fix the @cert-authority line"),
    ("svc@gpu01: Permission denied (publickey,gssapi-with-mic).\n",
     "authentication failed for svc@gpu01 (the server offers publickey,gssapi-with-mic): check "
     "IdentityFile, ssh-agent, the Kerberos ticket (klist) and authorized_keys"),
    ("Warning: Identity file /nonexist not accessible: No such file or directory.\n"
     "root@gpu01: Permission denied (publickey).\n",
     "identity file not found: /nonexist: fix -i or the inventory's identity_file"),
    ("ssh: connect to host 10.0.0.1 port 22: Connection refused\n",
     "connection refused by 10.0.0.1:22 (is sshd running? check the port: -p, or Port in the "
     "ssh config)"),
    ("ssh: Could not resolve hostname gpu01: Name or service not known\n",
     "cannot resolve host name gpu01: Name or service not known: fix the name, or give its "
     "HostName in the ssh config"),
    ("ssh: connect to host 10.0.0.1 port 22: Connection timed out\n",
     "timed out after 5 s connecting to 10.0.0.1:22: is the host up and its SSH port open to "
     "this machine?"),
    ("Connection to 10.0.0.1 port 22 timed out\n",
     "timed out after 5 s connecting to 10.0.0.1:22: is the host up and its SSH port open to "
     "this machine?"),
    ("ssh: connect to host 10.0.0.1 port 22: No route to host\n",
     "cannot connect to 10.0.0.1:22: No route to host: check the host's network and its "
     "address"),
    ("/etc/rt/cfg: line 1: Bad configuration option: bogus\n"
     "/etc/rt/cfg: terminating, 1 bad configuration options\n",
     "ssh cannot read its configuration: /etc/rt/cfg: line 1: Bad configuration option: bogus: "
     "fix it (`ssh -G gpu01` shows how OpenSSH reads it)"),
    ("Connection closed by 10.0.0.1 port 22\n",
     "SSH error with gpu01: Connection closed by 10.0.0.1 port 22: `ssh -v gpu01 true` shows "
     "why"),
    ("something new\n", "ssh to gpu01 failed (exit 255): something new; `ssh -v gpu01 true` "
     "shows why"),
    ("", "ssh to gpu01 failed (exit 255): no message; `ssh -v gpu01 true` shows why"),
])
def test_ssh_failures_read_into_one_line_with_a_fix(stderr: str, expected: str) -> None:
    assert describe_failure(HOST, stderr, 5.0, Path("/kh")) == expected


def test_the_same_wording_as_paramiko_where_both_see_the_failure() -> None:
    """A user switching transports reads the same opening for the same failure."""
    unknown = describe_failure(HOST, "No ED25519 host key is known for gpu01 and you have "
                               "requested strict checking.\n", 5.0)
    assert unknown == (
        "unknown host key for gpu01 (ED25519): add `ssh-keyscan -p 22 gpu01`'s line to the "
        "known_hosts ssh reads (UserKnownHostsFile, else ~/.ssh/known_hosts) after checking the "
        "fingerprint, or pass --accept-new-host-keys")
    assert describe_failure(HOST, CHANGED, 5.0).startswith(
        "host key for gpu01 CHANGED (possible MITM): fix known_hosts")
    assert describe_failure(HOST, "Permission denied (publickey).", 5.0).startswith(
        "authentication failed for the current user@gpu01")


# --------------------------------------------------------------------------- the runner


@pytest.fixture
def fake_ssh(tmp_path: Path) -> Path:
    """An ``ssh`` that records its argv, then runs the remote command here with sh (as sshd
    would hand it to the user's shell); exits 255 with ssh's message for host ``refused``."""
    path = tmp_path / "ssh"
    path.write_text(f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
with open({str(tmp_path / "argv")!r}, "a") as f:
    f.write(repr(args) + "\\n")
host, command = args[args.index("--") + 1:]
if host == "refused":
    sys.stderr.write("ssh: connect to host refused port 22: Connection refused\\n")
    sys.exit(255)
os.execvp("sh", ["sh", "-c", command])
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_runs_with_stdin_exit_codes_and_ssh_failures(fake_ssh: Path) -> None:
    remote = OpenSshRemote(program=str(fake_ssh), concurrency=2)
    assert isinstance(remote, InputRemote)
    out = remote.run_with_input([Host("a", 1), Host("refused", 1)],
                                ["sh", "-c", "cat; echo; echo err >&2; exit 3"], b"data\0x", 20)
    assert list(out) == ["a", "refused"]
    a = out["a"]
    assert (a.exit_code, a.stdout, a.stderr, a.error) == (3, "data\0x\n", "err\n", None)
    r = out["refused"]
    assert r.exit_code == 255 and r.error is not None
    assert r.error.startswith("connection refused by refused:22 (is sshd running?")
    assert "data" not in (fake_ssh.parent / "argv").read_text()


def test_run_each_gives_each_host_its_argv_and_bad_names_never_reach_ssh(
        fake_ssh: Path) -> None:
    remote = OpenSshRemote(program=str(fake_ssh))
    out = remote.run_each([(Host("a", 1), ["echo", "one"]), (Host("-oProxyCommand=x", 1),
                                                             ["echo", "two"])], 20)
    assert out["a"].ok and out["a"].stdout == "one\n"
    bad = out["-oProxyCommand=x"]
    assert bad.error is not None and "starts with '-'" in bad.error
    assert "ProxyCommand" not in (fake_ssh.parent / "argv").read_text()


def test_localhost_runs_here_unless_ssh_localhost(fake_ssh: Path) -> None:
    argv_log = fake_ssh.parent / "argv"
    r = OpenSshRemote(program=str(fake_ssh)).run([Host("localhost", 1)], ["echo", "hi"], 20)
    assert r["localhost"].stdout == "hi\n" and not argv_log.exists()
    r = OpenSshRemote(program=str(fake_ssh), ssh_localhost=True).run(
        [Host("localhost", 1)], ["echo", "hi"], 20)
    assert r["localhost"].stdout == "hi\n" and "'localhost'" in argv_log.read_text()


def test_output_is_capped_like_sshremotes_and_the_rest_drained(
        fake_ssh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert openssh.MAX_OUTPUT_BYTES == ssh.MAX_OUTPUT_BYTES
    monkeypatch.setattr(openssh, "MAX_OUTPUT_BYTES", 1000)
    r = OpenSshRemote(program=str(fake_ssh)).run(
        [Host("a", 1)], ["sh", "-c", "head -c 300000 /dev/zero; echo done >&2"], 20)["a"]
    assert r.ok and len(r.stdout) == 1000 and r.stderr == "done\n"


def test_timeout_kills_that_ssh_and_its_group_only(fake_ssh: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    bystander = subprocess.Popen(["sleep", "30"])  # in this test's own process group
    try:
        start = time.monotonic()
        r = OpenSshRemote(program=str(fake_ssh)).run(
            [Host("a", 1)], ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 1.5)["a"]
        assert r.error == "timed out after 1.5 s" and r.exit_code is None
        assert time.monotonic() - start < 10
        child = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)  # the command's own child went with ssh's process group
        assert bystander.poll() is None  # nothing outside that group was signalled
    finally:
        bystander.kill()
        bystander.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat_line = Path(f"/proc/{pid}/stat").read_text()
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def test_missing_ssh_program_and_config_are_named(tmp_path: Path) -> None:
    r = OpenSshRemote(program=str(tmp_path / "no-ssh")).run([Host("a", 1)], ["true"], 5)["a"]
    assert r.error is not None and "not found" in r.error and "--ssh-transport paramiko" in r.error
    with pytest.raises(RemoteError, match="does not exist"):
        OpenSshRemote(tmp_path / "missing_config")
    with pytest.raises(RemoteError, match="characters ssh cannot take"):
        OpenSshRemote(known_hosts=tmp_path / 'bad"name')
