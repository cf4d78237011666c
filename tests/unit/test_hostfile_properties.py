"""Property tests: every format round-trips; arbitrary input raises only InventoryError."""

from __future__ import annotations

import itertools
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrain.errors import InventoryError
from ringtrain.hostfile import (
    Host,
    Inventory,
    load_inventory,
    parse_inventory_text,
    render_inventory,
)
from ringtrain.hostfile.nodeset import compress, expand, split_items
from ringtrain.hostfile.openmpi import node_key

TEXT_FORMATS = ("openmpi", "mpich", "horovod", "nodelist", "pbs", "yaml", "toml")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_label = st.from_regex(r"[a-z0-9_](?:[a-z0-9_-]{0,6}[a-z0-9_])?", fullmatch=True)
_dns_names = st.lists(_label, min_size=1, max_size=3).map(".".join)
_numbered = st.tuples(
    st.sampled_from(["gpu", "node-", "n", "r1n"]), st.integers(0, 12), st.sampled_from([0, 2, 3])
).map(lambda t: f"{t[0]}{t[1]:0{t[2]}d}")
_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)
_plain_names = st.one_of(_dns_names, _numbered, _numbered, _ipv4)
_any_names = st.one_of(_plain_names, _ipv6)
_label_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True)
_label_values = st.from_regex(r"[A-Za-z0-9_.:/+@-]{0,10}", fullmatch=True)
_users = st.from_regex(r"[a-z_][a-z0-9_.-]{0,8}", fullmatch=True)
_paths = st.text(min_size=1, max_size=20).filter(
    lambda s: s.isprintable() and not s.startswith("-")
)


def _hosts(names, *, max_slots=False, extras=False, max_size=12):
    @st.composite
    def build(draw):
        chosen = draw(st.lists(names, min_size=1, max_size=max_size, unique=True))
        out = []
        for name in chosen:
            slots = draw(st.integers(1, 8))
            host = Host(name, slots)
            if max_slots and draw(st.booleans()):
                host = Host(name, slots, max_slots=slots + draw(st.integers(0, 8)))
            if extras:
                host = Host(
                    name, slots, max_slots=host.max_slots,
                    labels=tuple(draw(st.dictionaries(_label_keys, _label_values, max_size=3))
                                 .items()),
                    user=draw(st.none() | _users),
                    port=draw(st.none() | st.integers(1, 65535)),
                    identity_file=draw(st.none() | _paths),
                )
            out.append(host)
        return tuple(out)

    return build()


@st.composite
def _grouped(draw):
    """Inventories a YAML/TOML file can express: groups are contiguous blocks, loose hosts
    sit before or after all of them."""
    hosts = draw(_hosts(_any_names, max_slots=True, extras=True))
    cuts = sorted(draw(st.sets(st.integers(0, len(hosts)), max_size=4)) | {0, len(hosts)})
    blocks = [hosts[a:b] for a, b in itertools.pairwise(cuts) if b > a]
    loose_at = draw(st.sampled_from([None, 0, len(blocks) - 1]))
    group_names = draw(st.lists(_label, min_size=len(blocks), max_size=len(blocks), unique=True))
    groups = tuple(
        (g, tuple(h.name for h in block))
        for i, (g, block) in enumerate(zip(group_names, blocks, strict=True))
        if i != loose_at
    )
    return hosts, groups


def _domain(fmt):
    if fmt in ("yaml", "toml"):
        return _grouped()
    if fmt == "openmpi":  # names Open MPI tells apart (it cuts domains: openmpi.py refuses)
        return _hosts(_any_names, max_slots=True).filter(
            lambda hs: len({node_key(h.name) for h in hs}) == len(hs)).map(lambda h: (h, ()))
    if fmt == "pbs":
        return _hosts(_plain_names).map(lambda h: (h, ()))
    return _hosts(_any_names).map(lambda h: (h, ()))


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_parse_render_round_trip(fmt):
    @FAST
    @given(_domain(fmt))
    def check(case):
        hosts, groups = case
        inventory = Inventory(hosts=hosts, source="rt", format=fmt, groups=groups)
        text = render_inventory(inventory, fmt)
        assert parse_inventory_text(text, fmt, "rt") == inventory

    check()


_GRAMMAR = st.text(
    alphabet=st.sampled_from([*"gpu01[]-,:=# \t\n{}\"'slots_max.%@;$", "\u00e9", "\x00"]),
    max_size=60,
)
_STRUCTURED = st.text(
    alphabet=st.sampled_from(list("hostsgrupdefaultname:=-[]{}\"' \n\t,.&*!|>0129")),
    max_size=80,
)


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_arbitrary_text_raises_only_inventory_error(fmt):
    @FAST
    @given(st.one_of(st.text(max_size=80), _GRAMMAR, _STRUCTURED))
    def check(text):
        try:
            inventory = parse_inventory_text(text, fmt, "fuzz")
        except InventoryError as err:
            assert err.source == "fuzz" and err.hint
        else:
            assert inventory.hosts

    check()


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=80) | _GRAMMAR.map(str.encode), st.sampled_from(["x.txt", "x.yaml"]))
def test_arbitrary_files_with_detection_raise_only_inventory_error(data, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            load_inventory(path)
        except InventoryError as err:
            assert err.source == path


@settings(max_examples=100, deadline=None)
@given(st.lists(_plain_names, max_size=30, unique=True))
def test_compress_expands_back_in_order(names):
    expressions = compress(names)
    assert [n for e in expressions for n in expand(e)] == names
    assert all(len(split_items(e)) == 1 for e in expressions)


@pytest.mark.parametrize(
    ("names", "expressions"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu07"], ("gpu[01-03,07]",)),
        (["gpu9", "gpu10"], ("gpu[9-10]",)),
        (["gpu09", "gpu010"], ("gpu[09,010]",)),
        (["n2", "n1"], ("n2", "n1")),
        (["n1", "n01"], ("n1", "n01")),
        (["10.0.0.1", "10.0.0.2", "fd00::1"], ("10.0.0.[1-2]", "fd00::1")),
        (["a1.x", "a2.x", "b1"], ("a[1-2].x", "b1")),
    ],
)
def test_compress_examples(names, expressions):
    assert compress(names) == expressions
