"""OpenSshRemote (--ssh-transport openssh) against a real, throwaway sshd on 127.0.0.1, as
tests/integration/test_remote_sshd.py runs SshRemote: its own host key, here also signed by a
throwaway CA (HostCertificate), so that a known_hosts holding only ``@cert-authority`` is
accepted by OpenSSH and refused by paramiko with the message that names the line and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import probe
from ringtrain.remote.openssh import OpenSshRemote
from ringtrain.remote.ssh import SshRemote
from tests.integration import loopback_sshd

SSHD = "/usr/sbin/sshd"
pytestmark = [
    pytest.mark.ssh,
    pytest.mark.skipif(not (os.geteuid() == 0 and Path(SSHD).exists() and shutil.which("ssh")
                            and shutil.which("ssh-keygen")),
                       reason="needs root, sshd, ssh, ssh-keygen"),
]
OK = Host("h-ok", 1)


@dataclass
class Sshd(loopback_sshd.Sshd):
    ca_pub: str = ""

    def remote(self, **kw: object) -> OpenSshRemote:
        return OpenSshRemote(self.config, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    d = tmp_path_factory.mktemp("osshd")
    host_pub, ca_pub = loopback_sshd.keygen(d / "host_key"), loopback_sshd.keygen(d / "ca")
    subprocess.run(["ssh-keygen", "-q", "-s", str(d / "ca"), "-I", "ringtrain-test", "-h",
                    "-n", "127.0.0.1,h-ok", str(d / "host_key.pub")], check=True)
    (d / "authorized_keys").write_text(loopback_sshd.keygen(d / "client_key") + "\n")
    port, closed = loopback_sshd.free_port(), loopback_sshd.free_port()
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
HostCertificate {d}/host_key-cert.pub
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
""")
    for name, strict in (("ssh_config", "yes"), ("lax_ssh_config", "no")):
        (d / name).write_text("".join(f"""Host {alias}
    HostName 127.0.0.1
    Port {p}
    User root
    IdentityFile {d}/client_key
    IdentitiesOnly yes
    UserKnownHostsFile {d}/known_hosts
    StrictHostKeyChecking {strict}
""" for alias, p in (("h-ok", port), ("h-closed", closed))))
    proc = loopback_sshd.start_sshd(d / "sshd_config", port, d / "sshd.log")
    try:
        yield Sshd(d, port, closed, d / "ssh_config", d / "known_hosts", host_pub, ca_pub)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_command_runs_with_stdin_data_and_its_exit_code(sshd: Sshd) -> None:
    sshd.trust()
    data = b"secret-value-" + os.urandom(8).hex().encode() + b"\n\0end"
    echo = ["python3", "-c", "import os, sys; d = sys.stdin.buffer.read(); print(d.hex()); "
            "print(*(open(f'/proc/{p}/cmdline', 'rb').read() for p in ('self', os.getppid()))); "
            "sys.exit(7)"]
    r = sshd.remote().run_with_input([OK], echo, data, 20)["h-ok"]
    assert (r.error, r.exit_code) == (None, 7), r.stderr
    shown, cmdlines = r.stdout.splitlines()
    assert bytes.fromhex(shown) == data
    assert "secret-value" not in cmdlines and "import os" in cmdlines
    r = sshd.remote().run([OK], ["printf", "%s|", "a b", "it's", "$HOME"], 20)["h-ok"]
    assert (r.error, r.exit_code, r.stdout) == (None, 0, "a b|it's|$HOME|")


def test_unknown_key_refused_with_strict_checking(sshd: Sshd) -> None:
    """Even where the config says StrictHostKeyChecking no: the argv's yes wins."""
    sshd.known_hosts.write_text("")
    r = OpenSshRemote(sshd.dir / "lax_ssh_config").run([OK], ["true"], 20)["h-ok"]
    assert r.error is not None and r.error.startswith("unknown host key for h-ok (ED25519")
    assert f"`ssh-keyscan -p {sshd.port} 127.0.0.1`'s line" in r.error
    assert "--accept-new-host-keys" in r.error and r.exit_code == 255
    assert sshd.known_hosts.read_text() == ""


def test_unknown_key_accepted_with_accept_new(sshd: Sshd) -> None:
    other = sshd.dir / "accepted_known_hosts"
    other.write_text("")
    r = sshd.remote(known_hosts=other, accept_new_host_keys=True).run([OK], ["true"], 20)
    assert r["h-ok"].ok, r["h-ok"].error
    assert sshd.host_pub in other.read_text()
    again = sshd.remote(known_hosts=other).run([OK], ["true"], 20)["h-ok"]
    assert again.ok, again.error


@pytest.mark.parametrize("accept_new", [False, True])
def test_changed_key_refused_even_with_accept_new(sshd: Sshd, accept_new: bool) -> None:
    sshd.trust(loopback_sshd.keygen(sshd.dir / f"other_{accept_new}"))
    before = sshd.known_hosts.read_text()
    r = sshd.remote(accept_new_host_keys=accept_new).run([OK], ["true"], 20)["h-ok"]
    assert r.error is not None
    assert r.error.startswith("host key for h-ok CHANGED (possible MITM): fix known_hosts: "
                              "the server offers ED25519 SHA256:")
    assert f"{sshd.known_hosts} line 1 has another" in r.error
    assert sshd.known_hosts.read_text() == before


def test_ca_signed_host_key_openssh_accepts_paramiko_says_why_not(sshd: Sshd) -> None:
    sshd.known_hosts.write_text(f"# the site's CA\n@cert-authority [127.0.0.1]:{sshd.port} "
                                f"{sshd.ca_pub}\n")
    r = sshd.remote().run([OK], ["echo", "signed"], 20)["h-ok"]
    assert r.ok and r.stdout == "signed\n", (r.error, r.stderr)
    p = SshRemote(sshd.config).run([OK], ["true"], 20)["h-ok"]
    assert p.error == (
        f"h-ok: this host's key is CA-signed (@cert-authority in {sshd.known_hosts} line 2): "
        "paramiko cannot verify host certificates; pass --ssh-transport openssh")


def test_closed_port_and_timeout_reported_while_other_host_succeeds(sshd: Sshd) -> None:
    sshd.trust()
    out = sshd.remote().run([Host("h-closed", 1), OK], ["echo", "hi"], 20)
    assert list(out) == ["h-closed", "h-ok"]
    assert out["h-closed"].error is not None and out["h-closed"].error.startswith(
        f"connection refused by 127.0.0.1:{sshd.closed_port} (is sshd running?")
    assert out["h-ok"].ok and out["h-ok"].stdout == "hi\n"
    r = sshd.remote().run([OK], ["sleep", "30"], 2)["h-ok"]
    assert r.error == "timed out after 2 s" and r.duration_s < 10


def test_probe_over_openssh(sshd: Sshd) -> None:
    sshd.trust()
    report = probe(Inventory((OK, Host("h-closed", 1))), sshd.remote(), python=sys.executable,
                   timeout=30)
    ok = report.result("h-ok")
    assert ok.reachable and ok.error is None, ok.error
    assert ok.hostname == os.uname().nodename
    assert not report.result("h-closed").reachable
