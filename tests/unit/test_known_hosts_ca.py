"""``@cert-authority`` on the paramiko side: paramiko cannot verify a host certificate, so a host
known only through a CA line is refused with where that line is and the transport that can
(--ssh-transport openssh), not as an unknown host."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest

from ringtrain.remote.keys import KnownHosts
from ringtrain.remote.ssh import SshTarget, _HostKeyPolicy, _KeyRefused

KEY = paramiko.ECDSAKey.generate()
CA = paramiko.ECDSAKey.generate()


def _line(names: str, key: paramiko.PKey, marker: str = "") -> str:
    return f"{marker}{' ' if marker else ''}{names} {key.get_name()} {key.get_base64()}\n"


def _target(strict: str = "yes", port: int = 22) -> SshTarget:
    return SshTarget(alias="gpu01", hostname="10.0.0.1", port=port, user=None,
                     identity_files=(), identities_only=False, known_hosts_files=(),
                     strict=strict, connect_timeout=5.0)


def _policy(tmp_path: Path, text: str, target: SshTarget) -> tuple[_HostKeyPolicy, Path]:
    kh = tmp_path / "known_hosts"
    kh.write_text(text)
    return _HostKeyPolicy(KnownHosts((kh,), kh), target), kh


def test_store_names_the_ca_line_that_covers_a_host(tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    kh.write_text("# site CAs\n\n" + _line("other", KEY) + _line("*.rack1,10.0.0.*", CA,
                                                                  "@cert-authority"))
    store = KnownHosts((kh,), kh)
    assert store.cert_authority(["gpu01.rack1"], "gpu01") == (
        f"gpu01: this host's key is CA-signed (@cert-authority in {kh} line 4): paramiko "
        "cannot verify host certificates; pass --ssh-transport openssh")
    assert store.cert_authority(["gpu01.rack2"], "gpu01") is None
    assert store.keys_for(["gpu01.rack1"]) == ()  # a CA line is never a host key


def test_a_plain_key_wins_over_a_ca_line(tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    kh.write_text(_line("*", CA, "@cert-authority") + _line("gpu01", KEY))
    assert KnownHosts((kh,), kh).cert_authority(["gpu01"], "gpu01") is None


@pytest.mark.parametrize(("port", "pattern"), [(22, "10.0.0.1"), (2222, "[10.0.0.1]:2222")])
def test_paramiko_refusal_points_at_the_ca_line_and_openssh(tmp_path: Path, port: int,
                                                            pattern: str) -> None:
    policy, kh = _policy(tmp_path, _line(pattern, CA, "@cert-authority"), _target(port=port))
    with pytest.raises(_KeyRefused) as refused:
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY)
    assert str(refused.value) == (
        f"gpu01: this host's key is CA-signed (@cert-authority in {kh} line 1): paramiko "
        "cannot verify host certificates; pass --ssh-transport openssh")


def test_without_a_matching_ca_line_the_refusal_is_the_unknown_host(tmp_path: Path) -> None:
    policy, _ = _policy(tmp_path, _line("elsewhere", CA, "@cert-authority"), _target())
    with pytest.raises(_KeyRefused, match=r"^unknown host key for gpu01 "):
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY)


def test_accept_new_still_trusts_on_first_use(tmp_path: Path) -> None:
    """--accept-new-host-keys asked for trust on first use: unchanged by a CA line."""
    policy, kh = _policy(tmp_path, _line("*", CA, "@cert-authority"), _target("accept-new"))
    policy.missing_host_key(paramiko.SSHClient(), "10.0.0.1", KEY)
    assert kh.read_text().endswith(_line("10.0.0.1", KEY))
