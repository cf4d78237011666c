"""launch/job/hosts.py: -p/-i as defaults for the hosts that name none; this machine's names."""

from __future__ import annotations

import socket

from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.job.hosts import mark_this_machine, with_ssh_defaults
from ringtrain.remote.sshconf import render_ssh_config
from ringtrain.spec import SshSpec


def test_port_and_key_fill_only_what_the_inventory_left_out() -> None:
    inv = Inventory((Host("a", 1), Host("b", 1, port=2200, identity_file="/k/b"),
                     Host("localhost", 1)))
    out = with_ssh_defaults(inv, SshSpec(port=2222, identity_file="/k/all"))
    a, b, local = out.hosts
    assert (a.port, a.identity_file) == (2222, "/k/all")
    assert (b.port, b.identity_file) == (2200, "/k/b")
    assert (local.port, local.identity_file) == (None, None)
    text = render_ssh_config(out.hosts, None)
    assert "Host a\n    Port 2222\n    IdentityFile \"/k/all\"" in text  # mpirun's ssh too
    assert with_ssh_defaults(inv, SshSpec()) is inv


def test_this_machines_own_names_are_local_others_are_not() -> None:
    inv = Inventory((Host(socket.gethostname(), 2), Host("no-such-host.invalid", 1),
                     Host("localhost", 1), Host("192.0.2.7", 1)))
    own, unknown, localhost, other = mark_this_machine(inv).hosts
    assert own.local and own.is_local
    assert not unknown.local and not other.local  # 192.0.2.7: TEST-NET, never ours
    assert localhost.is_local
