"""``-H`` read as horovodrun reads it, with Horovod's own parser and rank math as the oracle.

``horovod.runner.common.util.hosts`` is what ``horovodrun -H`` runs: ``parse_hosts_and_slots``
for the names and slots, ``get_host_assignments`` for every rank's host, local and cross rank.
Only specs in Horovod's grammar (``name:slots``, names of ``[\\w.-]``) are compared; ringtrain's
extensions (default slots, IPv6, host lists) have their own tests.
"""

from __future__ import annotations

import pytest

from ringtrain.errors import InventoryError
from ringtrain.hostfile import (
    AllocationPolicy,
    allocate,
    parse_host_spec,
    parse_mpich_machinefile,
    parse_nodelist,
    select,
)

hosts = pytest.importorskip("horovod.runner.common.util.hosts")

SPECS = [
    "gpu01:4,gpu02:4",
    "localhost:0,gpu01:2",
    "gpu01:2,localhost:0,gpu02:1",
    "a:1,b:0,c:3",
    "localhost:2,gpu01:1",
    "n1:3,n2:1,n3:2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_names_and_slots_match_horovod(spec):
    names, slots = hosts.parse_hosts_and_slots(spec)
    inventory = parse_host_spec(spec)
    assert [(h.name, h.slots) for h in inventory.hosts] == [(n, slots[n]) for n in names]


@pytest.mark.parametrize("spec", SPECS)
def test_rank_placement_matches_horovod(spec):
    inventory = parse_host_spec(spec)
    for np in range(1, inventory.total_slots + 1):
        theirs = hosts.get_host_assignments(hosts.parse_hosts(spec), np, np)
        ours = allocate(inventory, np).ranks
        assert [
            (r.rank, r.host, r.local_rank, r.local_size, r.cross_rank, r.cross_size) for r in ours
        ] == [
            (s.rank, s.hostname, s.local_rank, s.local_size, s.cross_rank, s.cross_size)
            for s in theirs
        ], (spec, np)


def test_a_host_with_0_slots_is_listed_gets_no_rank_and_is_not_contacted():
    inventory = parse_host_spec("localhost:0,gpu01:2")
    assert inventory.names == ("localhost", "gpu01") and inventory.total_slots == 2
    alloc = allocate(inventory)
    assert [h.name for h in alloc.hosts] == ["gpu01"]
    assert dict(alloc.dropped)["localhost"].startswith("has 0 slots")
    # the launch probes the selected hosts only
    assert select(inventory, AllocationPolicy()).names == ("gpu01",)


def test_only_0_slot_hosts_is_an_error_as_in_horovod():
    with pytest.raises(ValueError, match="Requested more processes"):
        hosts.get_host_assignments(hosts.parse_hosts("localhost:0"), 1)
    with pytest.raises(InventoryError, match="every host has 0 slots") as info:
        parse_host_spec("localhost:0")
    assert info.value.hint


def test_0_slots_stays_refused_outside_dash_h():
    with pytest.raises(InventoryError, match="at least 1"):
        parse_nodelist("localhost:0 gpu01:2", "nl")
    with pytest.raises(InventoryError, match="at least 1"):
        parse_mpich_machinefile("localhost:0\ngpu01:2\n", "mf")
