"""remote.py without a network: known_hosts matching, ssh_config resolution, host key decisions,
error wording and the fan-out's bound. (Real sshd: tests/integration/test_remote_sshd.py.)"""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from ringtrain.errors import RemoteError
from ringtrain.hostfile.model import Host
from ringtrain.remote import CmdResult, InputRemote, LocalRemote, fan_out, sshg
from ringtrain.remote.keys import KnownHosts, fingerprint, parse_known_hosts
from ringtrain.remote.ssh import (
    SshRemote,
    SshTarget,
    _disabled_host_key_types,
    _HostKeyPolicy,
    _KeyRefused,
    describe_error,
    resolve_target,
)
from ringtrain.remote.targets import parse_jump
from ringtrain.schedulers.calls import SrunRemote

KEY_A = paramiko.ECDSAKey.generate()
KEY_B = paramiko.ECDSAKey.generate()


def line(names: str, key: paramiko.PKey = KEY_A) -> str:
    return f"{names} {key.get_name()} {key.get_base64()}\n"


def hashed(name: str) -> str:
    salt = b"0123456789abcdefghij"
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


def target(**kw: object) -> SshTarget:
    base: dict[str, object] = dict(alias="gpu01", hostname="10.0.0.1", port=22, user=None,
                                   identity_files=(), identities_only=False,
                                   known_hosts_files=(), strict="yes", connect_timeout=5.0)
    base.update(kw)
    return SshTarget(**base)  # type: ignore[arg-type]


def test_parse_and_match_known_hosts() -> None:
    text = ("# comment\n\n" + line("gpu01,10.0.0.1") + line("[gpu02]:2222") + line(hashed("gpu03"))
            + line("*.rack1,!bad.rack1") + "@revoked * " + f"{KEY_B.get_name()} "
            f"{KEY_B.get_base64()}\n" + "broken-line\n")
    entries = parse_known_hosts(text)
    assert len(entries) == 5
    assert entries[0].matches("gpu01") and entries[0].matches("10.0.0.1")
    assert entries[1].matches("[gpu02]:2222") and not entries[1].matches("gpu02")
    assert entries[2].matches("gpu03") and not entries[2].matches("gpu04")
    assert entries[3].matches("n1.rack1") and not entries[3].matches("bad.rack1")
    assert entries[4].marker == "@revoked"


def test_known_hosts_store_and_accept_new_append(tmp_path: Path) -> None:
    kh = tmp_path / "ssh" / "known_hosts"
    store = KnownHosts((kh,), kh)
    assert store.keys_for(("gpu01",)) == ()
    store.add(("gpu01", "10.0.0.1"), KEY_A.get_name(), KEY_A.get_base64())
    assert kh.read_text() == line("gpu01,10.0.0.1")
    assert kh.stat().st_mode & 0o777 == 0o600
    assert len(KnownHosts((kh,), kh).keys_for(("10.0.0.1",))) == 1


def test_key_names_follow_openssh() -> None:
    assert target().key_names == ("10.0.0.1",)  # HostName: what OpenSSH checks, not the alias
    assert target(port=2222).key_names == ("[10.0.0.1]:2222",)
    assert target(host_key_alias="node").key_names == ("node",)
    assert target(hostname="gpu01").key_names == ("gpu01",)


def _policy(tmp_path: Path, known: str, strict: str = "yes") -> tuple[_HostKeyPolicy, Path]:
    kh = tmp_path / "known_hosts"
    kh.write_text(known)
    return _HostKeyPolicy(KnownHosts((kh,), kh), target(strict=strict)), kh


def test_policy_known_key_passes(tmp_path: Path) -> None:
    policy, _ = _policy(tmp_path, line("10.0.0.1"))  # known by IP only: still fine
    policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)


def test_a_key_known_only_under_the_alias_is_unknown(tmp_path: Path) -> None:
    """OpenSSH (mpirun's ssh) looks the key up under the HostName, never the inventory's alias:
    the probe refuses what mpirun would refuse, instead of passing a host the job cannot
    reach."""
    policy, _ = _policy(tmp_path, line("gpu01"))
    with pytest.raises(_KeyRefused, match=r"^unknown host key for gpu01 .*ssh-keyscan -p 22 "
                                          r"10\.0\.0\.1"):
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)


def test_policy_unknown_key_refused_unless_accept_new(tmp_path: Path) -> None:
    policy, kh = _policy(tmp_path, line("other"))
    with pytest.raises(_KeyRefused, match=r"^unknown host key for gpu01 .*--accept-new-host-keys"):
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)
    policy, kh = _policy(tmp_path, line("other"), strict="accept-new")
    policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)
    assert kh.read_text().endswith(line("10.0.0.1"))


@pytest.mark.parametrize("strict", ["yes", "accept-new"])
def test_policy_changed_key_always_refused(tmp_path: Path, strict: str) -> None:
    policy, kh = _policy(tmp_path, line("10.0.0.1", KEY_B), strict=strict)
    before = kh.read_text()
    with pytest.raises(_KeyRefused, match=r"^host key for gpu01 CHANGED \(possible MITM\): fix "
                                          r"known_hosts"):
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)
    assert kh.read_text() == before


def test_policy_revoked_key_refused(tmp_path: Path) -> None:
    policy, _ = _policy(tmp_path, line("gpu01") + "@revoked " + line("*"), strict="accept-new")
    with pytest.raises(_KeyRefused, match="@revoked"):
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY_A)


def test_disabled_host_key_types_prefers_known_types() -> None:
    ecdsa = parse_known_hosts(line("h"))
    disabled = _disabled_host_key_types(ecdsa)
    assert "ecdsa-sha2-nistp256" not in disabled and "ssh-ed25519" in disabled
    rsa = parse_known_hosts("h ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ==\n")
    assert not {"rsa-sha2-512", "rsa-sha2-256"} & set(_disabled_host_key_types(rsa))
    assert _disabled_host_key_types(()) == []


CONFIG = """
Host gpu*
    HostName 10.0.0.%h
    User trainer
    Port 2222
    IdentityFile ~/.ssh/id_cluster
    IdentitiesOnly yes
    UserKnownHostsFile /tmp/kh1 /tmp/kh2
    StrictHostKeyChecking yes
    ConnectTimeout 3
Host gpu01
    HostName 10.0.0.1
Host loose
    StrictHostKeyChecking accept-new
Host jumpy
    ProxyJump bastion
"""


def test_resolve_target_from_ssh_config() -> None:
    cfg = paramiko.SSHConfig.from_text(CONFIG)
    t = resolve_target(Host("gpu01", 4), cfg)
    # first match wins, as in OpenSSH: "Host gpu*" sets HostName before "Host gpu01" is read
    assert (t.hostname, t.port, t.user, t.identities_only, t.connect_timeout) == (
        "10.0.0.gpu01", 2222, "trainer", True, 3.0)
    assert t.identity_files[0].endswith("/.ssh/id_cluster") and "~" not in t.identity_files[0]
    assert t.known_hosts_files == (Path("/tmp/kh1"), Path("/tmp/kh2"),
                                   Path("/etc/ssh/ssh_known_hosts"))
    assert t.strict == "yes"
    inv = resolve_target(Host("gpu02", 4, user="alice", port=22, identity_file="/k"), cfg,
                         known_hosts=Path("/x/kh"), accept_new=True)
    assert (inv.user, inv.port, inv.identity_files, inv.known_hosts_files, inv.strict) == (
        "alice", 22, ("/k",), (Path("/x/kh"),), "accept-new")
    assert resolve_target(Host("loose", 1), cfg).strict == "accept-new"
    # OpenSSH's own reading (ssh -G, what the probe uses) prints "no" as "false": accept-new
    # too, never "yes" (it was read as strict since ssh -G became the source)
    from ringtrain.remote import sshg

    class OpenSsh:
        def lookup(self, hostname: str) -> object:
            return sshg.parse(f"hostname {hostname}\nstricthostkeychecking false\n")

    assert resolve_target(Host("loose", 1), OpenSsh()).strict == "accept-new"
    plain = resolve_target(Host("other", 1), cfg)
    assert (plain.hostname, plain.port, plain.user) == ("other", 22, None)
    assert plain.known_hosts_files[-1] == Path("/etc/ssh/ssh_known_hosts")


def test_missing_ssh_config_is_a_remote_error(tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="does not exist"):
        SshRemote(tmp_path / "nope")


def test_an_unreachable_jump_host_is_named_per_host(tmp_path: Path) -> None:
    """ProxyJump is followed (tests/integration/test_ssh_openssh_sim.py goes through a real
    bastion); a hop that cannot be reached is this host's error, naming the hop."""
    cfg = tmp_path / "cfg"
    cfg.write_text(CONFIG + "Host bastion\n    HostName bastion.invalid\n")
    r = SshRemote(cfg).run([Host("jumpy", 1)], ["true"], 5)["jumpy"]
    assert r.error is not None and r.error.startswith("jump host bastion: cannot resolve host "
                                                      "name bastion.invalid"), r.error


@pytest.mark.parametrize(("spec", "hops"), [
    ("bastion", [("bastion", None, None)]),
    ("alice@b1:2222,b2", [("b1", "alice", 2222), ("b2", None, None)]),
    ("ssh://bob@[fe80::1]:22", [("fe80::1", "bob", 22)]),
])
def test_proxyjump_hops(spec: str, hops: list[tuple[str, str | None, int | None]]) -> None:
    assert [(h.name, h.user, h.port) for h in parse_jump(spec)] == hops


@pytest.mark.parametrize("spec", ["", "a b", "x@", "h:99999", "h;rm -rf /"])
def test_bad_proxyjump_hops_are_named(spec: str) -> None:
    with pytest.raises(ValueError, match="ProxyJump hop"):
        parse_jump(spec)


def test_ssh_g_output_reads_as_paramikos_lookup() -> None:
    opts = sshg.parse("user bob\nhostname 10.0.0.7\nport 2222\nproxyjump j1,j2\n"
                      "proxycommand none\nconnecttimeout none\nidentityfile ~/.ssh/id_a\n"
                      "identityfile ~/.ssh/id_b\nuserknownhostsfile /k1 /k2\n")
    assert opts["identityfile"] == ["~/.ssh/id_a", "~/.ssh/id_b"]
    assert "proxycommand" not in opts and "connecttimeout" not in opts
    t = resolve_target(Host("gpu01", 1), _Answer(opts))
    assert (t.hostname, t.port, t.user, t.proxy_jump) == ("10.0.0.7", 2222, "bob", "j1,j2")
    assert t.identity_files == ()  # OpenSSH's defaults that do not exist are skipped
    assert t.known_hosts_files[:2] == (Path("/k1"), Path("/k2"))


class _Answer:
    def __init__(self, opts: dict[str, object]) -> None:
        self.opts = opts

    def lookup(self, hostname: str) -> dict[str, object]:
        return self.opts


def test_error_wording() -> None:
    t = target()
    assert describe_error(ConnectionRefusedError(), t, 9) == (
        "connection refused by 10.0.0.1:22 (is sshd running?)")
    assert describe_error(TimeoutError(), t, 9) == (
        "timed out after 5 s connecting to 10.0.0.1:22")
    assert describe_error(TimeoutError("command deadline"), t, 9) == "timed out after 9 s"
    assert describe_error(paramiko.AuthenticationException(), t, 9).startswith(
        "authentication failed for the current user@gpu01")
    assert describe_error(socket.gaierror(-2, "Name or service not known"), t, 9) == (
        "cannot resolve host name 10.0.0.1: Name or service not known")


def test_fingerprint_format() -> None:
    assert fingerprint(KEY_A.get_base64()) == KEY_A.fingerprint


def test_fan_out_bounds_concurrency_keeps_order_and_isolates_failures() -> None:
    lock = threading.Lock()
    running, peak = 0, 0
    first_three = threading.Barrier(3, timeout=10)  # only passes if 3 run at once

    def work(h: Host) -> CmdResult:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if h.name in ("h0", "h1", "h2"):
            first_three.wait()
        time.sleep(0.02)
        with lock:
            running -= 1
        if h.name == "h3":
            raise RuntimeError("boom")
        return CmdResult(h.name, 0, h.name, "", None, 0.0)

    hosts = [Host(f"h{i}", 1) for i in range(10)]
    results = fan_out(hosts, work, concurrency=3)
    assert peak == 3
    assert list(results) == [h.name for h in hosts]
    assert results["h3"].error == "unexpected error: RuntimeError: boom"
    assert all(results[f"h{i}"].ok for i in range(10) if i != 3)


def test_local_remote_passes_data_on_stdin_and_every_remote_can() -> None:
    """run_with_input: the same bytes on every host's stdin (else stdin is /dev/null). Every
    Remote ringtrain has is an InputRemote; the SSH one is tested against a real sshd."""
    remote = LocalRemote()
    hosts = [Host("a", 1), Host("b", 1)]
    out = remote.run_with_input(hosts, ["cat"], b"v\0\n", 10)
    assert [(r.exit_code, r.stdout) for r in out.values()] == [(0, "v\0\n")] * 2
    assert remote.run(hosts[:1], ["cat"], 10)["a"].stdout == ""
    assert all(isinstance(r, InputRemote) for r in (remote, SshRemote(), SrunRemote()))


def test_fan_out_results_have_a_failed_view() -> None:
    """Fabric's GroupResult habit: the callers ask for .failed instead of filtering by hand."""
    from ringtrain.hostfile.model import Host
    from ringtrain.remote import CmdResult, HostResults, fan_out

    def answer(host: Host) -> CmdResult:
        if host.name == "b":
            raise OSError("boom")  # a host's bug becomes that host's result
        return CmdResult(host.name, 0 if host.name == "a" else 3, "", "", None, 0.0)

    results = fan_out([Host("a", 1), Host("b", 1), Host("c", 1)], answer, concurrency=2)
    assert isinstance(results, HostResults) and list(results) == ["a", "b", "c"]
    assert list(results.failed) == ["b", "c"] and list(results.succeeded) == ["a"]
    assert "OSError: boom" in (results.failed["b"].error or "")


def test_ssh_g_with_a_config_reads_the_systems_after_it_as_mpiruns_ssh_does(
        tmp_path: Path) -> None:
    """``ssh -F CONFIG`` skips /etc/ssh/ssh_config, which a plain ssh (and mpirun's per-run
    file, sshconf.render_ssh_config) reads after the user's: ringtrain's own ``ssh -G`` gets
    both, the user's first. Real OpenSSH answers; the system file here sets SendEnv (Debian's
    default) and HashKnownHosts."""
    from ringtrain.remote.sshconf import SYSTEM_CONFIG
    from ringtrain.remote.sshg import OpenSshConfig

    ssh = shutil.which("ssh")
    system = Path(SYSTEM_CONFIG)
    if ssh is None or not system.is_file() or "SendEnv" not in system.read_text():
        pytest.skip("needs OpenSSH's ssh and a system ssh_config with SendEnv")
    mine = tmp_path / "my_config"
    mine.write_text("Host gpu*\n    User trainer\n    Port 2222\n    HashKnownHosts no\n")
    seen = OpenSshConfig(mine, ssh).lookup("gpu07")
    assert (seen["user"], seen["port"]) == ("trainer", "2222")  # the user's, first
    assert seen["hashknownhosts"] == "no"  # the user's value wins over the system's yes
    assert any("LANG" in v for v in seen["sendenv"])  # the system's, which -F alone skips
    alone = subprocess.run([ssh, "-F", str(mine), "-G", "gpu07"], capture_output=True,
                           text=True, check=True).stdout
    assert "sendenv" not in alone.lower()  # what the probe read before
