"""SshRemote against a real, throwaway sshd on 127.0.0.1 (own host key, config, pid file)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import probe
from ringtrain.remote.ssh import SshRemote
from tests.integration import loopback_sshd

SSHD = "/usr/sbin/sshd"
pytestmark = [
    pytest.mark.ssh,
    pytest.mark.skipif(not (os.geteuid() == 0 and Path(SSHD).exists()
                            and shutil.which("ssh-keygen")), reason="needs root, sshd, ssh-keygen"),
]


@dataclass
class Sshd(loopback_sshd.Sshd):
    def remote(self, **kw: object) -> SshRemote:
        return SshRemote(self.config, **kw)  # type: ignore[arg-type]


# a ProxyCommand: stdin to a TCP connection, the connection to stdout
RELAY = """import os, socket, sys, threading
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while data := os.read(0, 65536):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := conn.recv(65536):
    os.write(1, data)
"""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    d = tmp_path_factory.mktemp("sshd")
    host_pub = loopback_sshd.keygen(d / "host_key")
    client_pub = loopback_sshd.keygen(d / "client_key")
    (d / "authorized_keys").write_text(client_pub + "\n")
    port, closed = loopback_sshd.free_port(), loopback_sshd.free_port()
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
""")
    hosts = "".join(f"""Host {alias}
    HostName 127.0.0.1
    Port {p}
    User root
    IdentityFile {d}/client_key
    IdentitiesOnly yes
    UserKnownHostsFile {d}/known_hosts
    StrictHostKeyChecking yes
""" for alias, p in (("h-ok", port), ("h-closed", closed)))
    (d / "relay.py").write_text(RELAY)
    hosts += f"""Host h-proxy
    HostName 127.0.0.1
    Port {port}
    User root
    IdentityFile {d}/client_key
    IdentitiesOnly yes
    UserKnownHostsFile {d}/known_hosts
    StrictHostKeyChecking yes
    ProxyCommand {sys.executable} {d}/relay.py 127.0.0.1 {port}
"""
    (d / "ssh_config").write_text(hosts)
    proc = loopback_sshd.start_sshd(d / "sshd_config", port, d / "sshd.log")
    try:
        yield Sshd(d, port, closed, d / "ssh_config", d / "known_hosts", host_pub)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_known_key_runs_and_quotes_argv(sshd: Sshd) -> None:
    sshd.trust()
    r = sshd.remote().run([Host("h-ok", 1)], ["printf", "%s|", "a b", "it's", "$HOME"], 20)["h-ok"]
    assert r.error is None, r.error
    assert (r.exit_code, r.stdout) == (0, "a b|it's|$HOME|")


@pytest.mark.parametrize("alias", ["h-ok", "h-proxy"])
def test_runs_while_the_launcher_holds_thousands_of_descriptors(sshd: Sshd, alias: str) -> None:
    """A launcher supervising 8,000 ranks holds a connection for each: the SSH it runs then
    (teardown, a rested host's check) gets descriptors past select()'s 1,024, where
    ``select.select`` raised ValueError ("filedescriptor out of range") for every host; and
    through a ProxyCommand, whose pipe paramiko's own ProxyCommand waited on with select."""
    import resource

    sshd.trust()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1300:
        pytest.skip(f"this process may open {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert held[-1] > 1024
        r = sshd.remote().run([Host(alias, 1)], ["echo", "reached"], 20)[alias]
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (r.error, r.exit_code, r.stdout) == (None, 0, "reached\n")


def test_exit_code_stderr_and_timeout(sshd: Sshd) -> None:
    sshd.trust()
    remote = sshd.remote()
    r = remote.run([Host("h-ok", 1)], ["sh", "-c", "echo oops >&2; exit 7"], 20)["h-ok"]
    assert (r.exit_code, r.stderr, r.error) == (7, "oops\n", None)
    r = remote.run([Host("h-ok", 1)], ["sleep", "30"], 2)["h-ok"]
    assert r.error == "timed out after 2 s" and r.duration_s < 10


def test_data_goes_on_stdin_never_on_the_command_line(sshd: Sshd) -> None:
    """run_with_input (the secrets file under Gloo): the bytes reach the command's stdin, which
    ends where they do; the command line the sshd and shell see is the argv alone."""
    sshd.trust()
    data = b"secret-value-" + os.urandom(8).hex().encode() + b"\n\0end"
    echo = ["python3", "-c", "import os, sys; d = sys.stdin.buffer.read(); print(d.hex()); "
            "print(*(open(f'/proc/{p}/cmdline', 'rb').read() for p in ('self', os.getppid())))"]
    r = sshd.remote().run_with_input([Host("h-ok", 1)], echo, data, 20)["h-ok"]
    assert r.error is None and r.exit_code == 0, (r.error, r.stderr)
    shown, lines = r.stdout.splitlines()
    assert bytes.fromhex(shown) == data
    assert "secret-value" not in lines and "import os" in lines


def test_unknown_key_refused(sshd: Sshd) -> None:
    sshd.known_hosts.write_text("")
    r = sshd.remote().run([Host("h-ok", 1)], ["true"], 20)["h-ok"]
    assert r.error is not None and r.error.startswith("unknown host key for h-ok (ssh-ed25519 ")
    assert "--accept-new-host-keys" in r.error and r.exit_code is None
    assert sshd.known_hosts.read_text() == ""


def test_unknown_key_accepted_with_accept_new(sshd: Sshd) -> None:
    sshd.known_hosts.write_text("")
    r = sshd.remote(accept_new_host_keys=True).run([Host("h-ok", 1)], ["true"], 20)["h-ok"]
    assert r.ok, r.error
    # under the HostName, where OpenSSH (mpirun's ssh) looks it up and would have written it
    assert sshd.known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n"
    again = sshd.remote().run([Host("h-ok", 1)], ["true"], 20)["h-ok"]  # now strictly known
    assert again.ok, again.error


@pytest.mark.parametrize("accept_new", [False, True])
def test_changed_key_refused_even_with_accept_new(sshd: Sshd, accept_new: bool) -> None:
    other = loopback_sshd.keygen(sshd.dir / f"other_{accept_new}")
    sshd.trust(other)
    before = sshd.known_hosts.read_text()
    r = sshd.remote(accept_new_host_keys=accept_new).run([Host("h-ok", 1)], ["true"], 20)["h-ok"]
    assert r.error is not None
    assert r.error.startswith("host key for h-ok CHANGED (possible MITM): fix known_hosts")
    assert sshd.known_hosts.read_text() == before


def test_closed_port_reported_while_other_host_succeeds(sshd: Sshd) -> None:
    sshd.trust()
    out = sshd.remote().run([Host("h-closed", 1), Host("h-ok", 1)], ["echo", "hi"], 20)
    assert list(out) == ["h-closed", "h-ok"]
    assert out["h-closed"].error == (
        f"connection refused by 127.0.0.1:{sshd.closed_port} (is sshd running?)")
    assert out["h-ok"].ok and out["h-ok"].stdout == "hi\n"


def test_probe_over_ssh(sshd: Sshd) -> None:
    import sys

    sshd.trust()
    report = probe(Inventory((Host("h-ok", 1), Host("h-closed", 1))), sshd.remote(),
                   python=sys.executable, timeout=30)
    ok = report.result("h-ok")
    assert ok.reachable and ok.error is None, ok.error
    assert ok.versions.mpi == "Open MPI 4.1.4" and ok.hostname == os.uname().nodename
    assert not report.result("h-closed").reachable


def test_a_host_that_wants_hostbased_authentication_is_told_to_use_openssh(
        sshd: Sshd) -> None:
    """paramiko cannot do hostbased authentication: the error says which methods the host
    accepts and names --ssh-transport openssh, not the key and agent checks (issue 42 item 6).
    A second sshd, the same keys, only hostbased allowed."""
    sshd.trust()
    port = loopback_sshd.free_port()
    config = sshd.dir / "sshd_hostbased_config"
    config.write_text((sshd.dir / "sshd_config").read_text().replace(
        f"Port {sshd.port}\n", f"Port {port}\n").replace(
        f"PidFile {sshd.dir}/sshd.pid", f"PidFile {sshd.dir}/sshd_hb.pid")
        + "HostbasedAuthentication yes\nPubkeyAuthentication no\n"
          "AuthenticationMethods hostbased\n")
    (sshd.dir / "ssh_config_hb").write_text(
        sshd.config.read_text().replace(f"Port {sshd.port}\n", f"Port {port}\n"))
    with (sshd.dir / "known_hosts").open("a") as known:
        known.write(f"[h-ok]:{port},[127.0.0.1]:{port} {sshd.host_pub}\n")
    proc = loopback_sshd.start_sshd(config, port, sshd.dir / "sshd_hb.log")
    try:
        r = SshRemote(sshd.dir / "ssh_config_hb").run([Host("h-ok", 1)], ["true"], 20)["h-ok"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert r.error is not None and "the host accepts only hostbased" in r.error, r.error
    assert r.error.endswith("pass --ssh-transport openssh (the system's ssh)")
