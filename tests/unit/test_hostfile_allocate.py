"""Allocation: policy, probe caps, ring order by topology label, and the errors' hints."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringtrain.errors import AllocationError
from ringtrain.hostfile import (
    AllocationPolicy,
    Host,
    Inventory,
    allocate,
    parse_host_spec,
)


def _inv(*hosts: Host) -> Inventory:
    return Inventory(hosts=hosts, source="inv")


def _placed(alloc):
    return [(h.name, h.slots) for h in alloc.hosts]


def _racked(*spec: tuple[str, int, str]) -> Inventory:
    return _inv(*(Host(n, s, labels=(("rack", r),)) for n, s, r in spec))


def test_fills_hosts_in_order_with_horovod_rank_math():
    alloc = allocate(parse_host_spec("a:4,b:2,c:4"), 7)
    assert _placed(alloc) == [("a", 4), ("b", 2), ("c", 1)]
    assert [(r.rank, r.local_rank, r.host) for r in alloc.ranks][3:6] == [
        (3, 3, "a"), (4, 0, "b"), (5, 1, "b"),
    ]
    # local_rank 1 exists on a and b only: horovod's cross_size counts those hosts
    r5 = alloc.ranks[5]
    assert (r5.local_size, r5.cross_rank, r5.cross_size) == (2, 1, 2)
    assert (alloc.ranks[6].cross_rank, alloc.ranks[6].cross_size) == (2, 3)
    assert alloc.dropped == ()
    assert alloc.np == 7 and alloc.ranks_on("b") == (4, 5)


def test_default_np_uses_every_slot_and_keeps_host_fields():
    inv = _inv(Host("a", 2, user="u", labels=(("rack", "1"),)), Host("b", 1))
    alloc = allocate(inv)
    assert alloc.np == 3
    assert alloc.hosts[0].user == "u" and alloc.hosts[0].label("rack") == "1"


def test_include_exclude_globs_and_host_lists():
    inv = parse_host_spec("gpu[01-06]:2,cpu01:1")
    policy = AllocationPolicy(include=("gpu*",), exclude=("gpu[02-03],gpu06",))
    alloc = allocate(inv, policy=policy)
    assert [h.name for h in alloc.hosts] == ["gpu01", "gpu04", "gpu05"]
    reasons = dict(alloc.dropped)
    assert "--include" in reasons["cpu01"] and "--exclude" in reasons["gpu02"]


def test_glob_character_classes_still_work():
    inv = parse_host_spec("gpu1:1,gpu2:1,gpu3:1")
    alloc = allocate(inv, policy=AllocationPolicy(exclude=("gpu[!1]",)))
    assert [h.name for h in alloc.hosts] == ["gpu1"]


def test_pattern_matching_nothing_is_an_error_listing_hosts():
    with pytest.raises(AllocationError) as info:
        allocate(parse_host_spec("gpu01:1,gpu02:1"), policy=AllocationPolicy(exclude=("gpu3",)))
    assert "matches no host" in info.value.message
    assert "gpu01, gpu02" in info.value.hint
    with pytest.raises(AllocationError, match="start > stop"):
        allocate(parse_host_spec("gpu01:1"), policy=AllocationPolicy(include=("gpu[5-1]",)))


def test_slot_overrides_and_max_slots():
    inv = _inv(Host("a", 4, max_slots=6), Host("b", 4))
    alloc = allocate(inv, policy=AllocationPolicy(slot_overrides=(("a", 6), ("b", 1))))
    assert _placed(alloc) == [("a", 6), ("b", 1)]
    with pytest.raises(AllocationError, match="exceeds a's max_slots=6"):
        allocate(inv, policy=AllocationPolicy(slot_overrides=(("a", 7),)))
    with pytest.raises(AllocationError, match="at least 1"):
        allocate(inv, policy=AllocationPolicy(slot_overrides=(("b", 0),)))


def test_too_many_ranks_names_every_dropped_host_and_a_fix():
    inv = parse_host_spec("gpu01:4,gpu02:4,gpu03:4,gpu04:4")
    with pytest.raises(AllocationError) as info:
        allocate(inv, 16, policy=AllocationPolicy(exclude=("gpu04",)))
    message = info.value.message
    assert message.startswith("asked for 16 ranks, 12 slots left in -H")
    assert "gpu04 excluded by --exclude (4 slots)" in message
    assert info.value.hint == "pass -np 12 or fewer, or add hosts"


def test_np_bounds():
    inv = parse_host_spec("a:2")
    with pytest.raises(AllocationError, match="at least 1"):
        allocate(inv, 0)
    with pytest.raises(AllocationError, match="asked for 3 ranks, 2 slots left"):
        allocate(inv, 3)


def test_min_hosts():
    inv = parse_host_spec("a:4,b:4,c:4")
    assert len(allocate(inv, 8, policy=AllocationPolicy(min_hosts=2)).hosts) == 2
    with pytest.raises(AllocationError, match="4 ranks fill only 1 host"):
        allocate(inv, 4, policy=AllocationPolicy(min_hosts=2))
    with pytest.raises(AllocationError, match=r"only 2 host\(s\) usable, --min-hosts is 3"):
        allocate(inv, 4, policy=AllocationPolicy(min_hosts=3, exclude=("c",)))
    with pytest.raises(AllocationError, match="at least 1"):
        allocate(inv, policy=AllocationPolicy(min_hosts=0))


def test_ring_label_groups_racks_so_the_ring_crosses_each_boundary_once():
    inv = _racked(("a1", 2, "r1"), ("b1", 2, "r2"), ("a2", 2, "r1"), ("b2", 2, "r2"))
    plain = allocate(inv, policy=AllocationPolicy())
    assert [h.name for h in plain.hosts] == ["a1", "b1", "a2", "b2"]
    grouped = allocate(inv, policy=AllocationPolicy(ring_label="rack"))
    assert [h.name for h in grouped.hosts] == ["a1", "a2", "b1", "b2"]
    assert grouped.ring_crossings == 2
    assert allocate(inv, policy=AllocationPolicy(ring_label="rack")).ranks[4].host == "b1"
    interleaved = allocate(inv, policy=AllocationPolicy(ring_label="rack"), np=8)
    assert interleaved.ring_crossings == 2


def test_ring_label_uses_fewest_groups_when_not_all_slots_are_needed():
    inv = _racked(("a1", 2, "r1"), ("b1", 4, "r2"), ("b2", 4, "r2"), ("c1", 2, "r3"))
    alloc = allocate(inv, 8, policy=AllocationPolicy(ring_label="rack"))
    assert _placed(alloc) == [("b1", 4), ("b2", 4)]
    assert alloc.ring_crossings == 0
    alloc = allocate(inv, 10, policy=AllocationPolicy(ring_label="rack"))
    assert [h.label("rack") for h in alloc.hosts] == ["r1", "r2", "r2"]
    assert alloc.ring_crossings == 2


def test_ring_label_missing_everywhere_or_on_some_hosts():
    with pytest.raises(AllocationError, match="no host has the ring label 'rack'"):
        allocate(parse_host_spec("a:1,b:1"), policy=AllocationPolicy(ring_label="rack"))
    inv = _inv(Host("x", 1), Host("a", 1, labels=(("rack", "r1"),)))
    alloc = allocate(inv, policy=AllocationPolicy(ring_label="rack"))
    assert [h.name for h in alloc.hosts] == ["a", "x"]


@st.composite
def _racked_inventories(draw):
    n = draw(st.integers(1, 12))
    racks = draw(st.lists(st.sampled_from("ABCD"), min_size=n, max_size=n))
    slots = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    hosts = tuple(
        Host(f"h{i}", s, labels=(("rack", r),))
        for i, (r, s) in enumerate(zip(racks, slots, strict=True))
    )
    return _inv(*hosts)


@settings(max_examples=150, deadline=None)
@given(_racked_inventories(), st.data())
def test_allocation_invariants(inv, data):
    np = data.draw(st.integers(1, inv.total_slots))
    label = data.draw(st.sampled_from([None, "rack"]))
    alloc = allocate(inv, np, policy=AllocationPolicy(ring_label=label))
    assert [r.rank for r in alloc.ranks] == list(range(np))
    assert sum(h.slots for h in alloc.hosts) == np
    for host in alloc.hosts:
        ranks = alloc.ranks_on(host.name)
        assert list(ranks) == list(range(ranks[0], ranks[0] + host.slots))  # contiguous
        assert host.slots <= inv.host(host.name).slots
    assert [r.local_rank for r in alloc.ranks if r.host == alloc.hosts[-1].name] == list(
        range(alloc.hosts[-1].slots)
    )
    if label is not None:
        racks = [h.label("rack") for h in alloc.hosts]
        distinct = len(set(racks))
        # each rack forms one contiguous block: the cyclic ring crosses k boundaries for k racks
        assert alloc.ring_crossings == (distinct if distinct > 1 else 0)
        capacity = {}
        for host in inv.hosts:
            capacity[host.label("rack")] = capacity.get(host.label("rack"), 0) + host.slots
        biggest = sorted(capacity.values(), reverse=True)
        fewest = next(k for k in range(1, len(biggest) + 1) if sum(biggest[:k]) >= np)
        assert distinct == fewest
        if np == inv.total_slots:
            assert len(alloc.hosts) == len(inv.hosts)


def test_the_launching_machine_takes_the_first_ranks_as_mpirun_maps_it():
    """mpirun maps its own node first wherever the hostfile lists it (Open MPI 4.1; the oracle
    test checks it against mpirun), so ringtrain's ranks must say the same."""
    alloc = allocate(parse_host_spec("a:2,localhost:2,b:1"), 3)
    assert _placed(alloc) == [("localhost", 2), ("a", 1)]
    assert [r.host for r in alloc.ranks] == ["localhost", "localhost", "a"]
    assert [h for h, _ in alloc.dropped] == ["b"]
