"""The ssh_config ringtrain writes for mpirun when the inventory carries SSH coordinates."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringtrain.errors import UsageError
from ringtrain.hostfile import Host, allocate, parse_yaml_inventory
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.remote.sshconf import needs_ssh_config, render_ssh_config
from ringtrain.spec import LaunchSpec, SshSpec

YAML = """\
defaults: {user: train, identity_file: /keys/id_ed25519, slots: 2}
hosts:
  - gpu01
  - {name: gpu02, port: 2222}
"""


def test_render_puts_host_settings_before_the_users_config() -> None:
    inv = parse_yaml_inventory(YAML, "inv.yaml")
    text = render_ssh_config(inv.hosts, Path("/etc/rt/ssh_config"))
    assert text.index("Host gpu01") < text.index("Host gpu02") < text.index("Include")
    assert "    User train\n" in text and "    Port 2222\n" in text
    assert '    IdentityFile "/keys/id_ed25519"\n' in text
    assert 'Include "/etc/rt/ssh_config"\n    Include "/etc/ssh/ssh_config"\n' in text
    # dead-link detection last: the user's and the system's values come first and win
    assert text.rstrip().endswith("Host *\n    ServerAliveInterval 5\n    ServerAliveCountMax 3")
    # host keys strictly, before the user's config (ssh takes the first value it finds)
    assert text.index("    StrictHostKeyChecking yes") < text.index("Include")


def test_plain_hosts_need_no_config() -> None:
    assert not needs_ssh_config((Host("gpu01", 4), Host("localhost", 2, user="x")))


def test_plan_points_mpirun_at_the_generated_config() -> None:
    inv = parse_yaml_inventory(YAML, "inv.yaml")
    request = LaunchSpec(script="t.py", working_dir=Path("/w"), runs_dir=Path("/w/runs"))
    plan = make_plan(request, allocate(inv), PlanInputs(SessionEnv("R", {"PATH": "/bin"},
                                                                   False, "/py")))
    assert "ssh -F /w/runs/R/attempt-1/ssh_config" in plan.command.argv
    assert "Host gpu02" in plan.ssh_config_text


def test_quotes_in_paths_are_refused() -> None:
    with pytest.raises(UsageError, match="quotes"):
        render_ssh_config((Host("gpu01", 1, identity_file='/k/"x'),), None)


def test_known_hosts_reaches_mpiruns_ssh_for_plain_hosts() -> None:
    """--known-hosts: the probe verified keys against that file, so mpirun's own ssh must too
    (strictly), or it would consult ~/.ssh/known_hosts and ask or trust on its own."""
    inv = allocate(parse_yaml_inventory("hosts: [gpu01, gpu02]\n", "inv.yaml"))
    request = LaunchSpec(script="t.py", working_dir=Path("/w"), runs_dir=Path("/w/runs"),
                         ssh=SshSpec(known_hosts=Path("/etc/rt/known_hosts")))
    plan = make_plan(request, inv, PlanInputs(SessionEnv("R", {"PATH": "/bin"}, False, "/py")))
    assert "ssh -F /w/runs/R/attempt-1/ssh_config" in plan.command.argv
    text = plan.ssh_config_text
    assert '    UserKnownHostsFile "/etc/rt/known_hosts"\n    StrictHostKeyChecking yes\n' in text
    assert text.index("UserKnownHostsFile") < text.index("Include")  # ssh: first value wins
    local = make_plan(request, allocate(parse_yaml_inventory("hosts: [localhost]\n", "i.yaml")),
                      PlanInputs(SessionEnv("R", {"PATH": "/bin"}, False, "/py")))
    assert local.ssh_config_text == ""  # no ssh at all


def test_mpiruns_ssh_checks_keys_even_when_the_users_config_says_no(tmp_path: Path) -> None:
    """Checked with OpenSSH itself (``ssh -G``): a user's ``StrictHostKeyChecking no`` loses to
    ringtrain's config, their other settings still apply, and so does the system's config,
    which ``-F`` alone would skip."""
    import shutil
    import subprocess

    user = tmp_path / "user_config"
    user.write_text("Host *\n    StrictHostKeyChecking no\n    ServerAliveInterval 17\n")
    config = tmp_path / "ssh_config"
    config.write_text(render_ssh_config((Host("gpu01", 1, port=2222),), user))
    out = subprocess.run([shutil.which("ssh") or "/usr/bin/ssh", "-F", str(config), "-G",
                          "gpu01"], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    got = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert got["stricthostkeychecking"] == "true" and got["port"] == "2222"
    assert got["serveraliveinterval"] == "17"  # the user's value wins over ringtrain's 5
    assert got["serveralivecountmax"] == "3"  # ringtrain's, where nobody set one
    system = Path("/etc/ssh/ssh_config")
    if system.exists() and "HashKnownHosts yes" in system.read_text():  # Debian's, say
        assert got["hashknownhosts"] == "yes"  # OpenSSH's default is no
