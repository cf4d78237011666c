"""Slurm host lists: a corpus of forms, each with what ``scontrol show hostnames`` makes of it.

``SLURM`` is scontrol's output (Slurm 22.05), or None when scontrol refuses the list.
tests/integration/test_inventory_oracles.py checks every entry against scontrol itself and
ringtrain against scontrol directly; these unit tests pin ringtrain's side without Slurm.
Where ringtrain deliberately differs, ``ringtrain`` says how and ``why`` says why
(docs/INVENTORIES.md lists the same differences).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ringtrain.errors import InventoryError
from ringtrain.hostfile import (
    load_inventory,
    parse_host_spec,
    parse_nodelist,
    parse_yaml_inventory,
)
from ringtrain.hostfile.nodeset import compress, expand

SAME = "same"
REFUSES = "refuses"  # scontrol reads it; ringtrain refuses it on purpose
ACCEPTS = "accepts"  # scontrol refuses it; ringtrain reads it on purpose


@dataclass(frozen=True)
class ListCase:
    expr: str
    slurm: tuple[str, ...] | None
    ringtrain: str = SAME
    error: str = ""
    why: str = ""
    names: tuple[str, ...] | None = None  # ringtrain's, when it ACCEPTS


def _n(text: str) -> tuple[str, ...]:
    return tuple(text.split())


CORPUS = (
    ListCase("a[1-3,5]", _n("a1 a2 a3 a5")),
    ListCase("b[01-02]", _n("b01 b02")),
    ListCase("gpu[001-010]", tuple(f"gpu{i:03d}" for i in range(1, 11))),
    ListCase("a[01-2,3]", _n("a01 a02 a3")),
    ListCase("a[1-02]", _n("a1 a2")),
    ListCase("a[08-10]", _n("a08 a09 a10")),
    ListCase("a[9-11]", _n("a9 a10 a11")),
    ListCase("a[0-0]", _n("a0")),
    ListCase("a[001-100]", tuple(f"a{i:03d}" for i in range(1, 101))),
    ListCase("a[1-3],b", _n("a1 a2 a3 b")),
    ListCase("a[1-2,5-6],c[7]", _n("a1 a2 a5 a6 c7")),
    ListCase("n[1-2]x[1-2]", _n("n1x1 n1x2 n2x1 n2x2")),
    ListCase("rack[1-2]-n[01-02]", _n("rack1-n01 rack1-n02 rack2-n01 rack2-n02")),
    ListCase("x[1-3]y[1-2]z[1-2]",
             _n("x1y1z1 x1y1z2 x2y1z1 x2y1z2 x3y1z1 x3y1z2 x1y2z1 x1y2z2 x2y2z1 x2y2z2 x3y2z1 "
                "x3y2z2")),
    ListCase("a[1-2]b[1-2]c[1-2]d[1-2]",
             _n("a1b1c1d1 a1b1c1d2 a2b1c1d1 a2b1c1d2 a1b2c1d1 a1b2c1d2 a2b2c1d1 a2b2c1d2 "
                "a1b1c2d1 a1b1c2d2 a2b1c2d1 a2b1c2d2 a1b2c2d1 a1b2c2d2 a2b2c2d1 a2b2c2d2")),
    ListCase("a-[1-2]", _n("a-1 a-2")),
    ListCase("a.b[1-2]", _n("a.b1 a.b2")),
    ListCase("A[1-2]", _n("A1 A2")),
    ListCase("10.0.0.[1-3]", _n("10.0.0.1 10.0.0.2 10.0.0.3")),
    ListCase("gpu[01-04] gpu[05-08]", tuple(f"gpu{i:02d}" for i in range(1, 9))),
    ListCase("a[1-2] , b", _n("a1 a2 b")),
    ListCase("a,,b", _n("a b")),
    ListCase("a[1-2],", _n("a1 a2")),
    ListCase("a[1-10:2]", None, error="Slurm host lists have no steps"),
    ListCase("a[3-1]", None, error="start > stop"),
    ListCase("a[]", None, error="bad range"),
    ListCase("a[x]", None, error="bad range 'x'"),
    ListCase("a[-1]", None, error="bad range '-1'"),
    ListCase("a[1,]", None, error="bad range"),
    ListCase("a[[1-2]]", None, error="nested brackets"),
    ListCase("a[1-2]]", None, error="unbalanced brackets"),
    # Read by scontrol, refused by ringtrain on purpose.
    ListCase("a[1-3", _n("a]"), REFUSES, "unbalanced brackets",
             "scontrol turns an unclosed bracket into the host 'a]'"),
    ListCase("a[1-]", _n("a1"), REFUSES, "bad range '1-'", "a range needs both ends"),
    ListCase("a[ 1-2]", _n("a01 a02"), REFUSES, "contains a space",
             "scontrol pads the numbers to the width of ' 1'"),
    ListCase("a[1,1]", _n("a1 a1"), REFUSES, "listed twice",
             "a host listed twice is a mistake in an inventory (give it its total slots)"),
    ListCase("[1-2]", _n("1 2"), REFUSES, "neither NAME:SLOTS nor an IPv6",
             "a leading '[' is a bracketed IPv6 address ([fd00::1]:4) in ringtrain's lists"),
    # Refused by scontrol, read by ringtrain on purpose.
    ListCase("gpu[1-2].example.org", None, ACCEPTS,
             why="text after the last bracket: FQDN clusters need it, ringtrain's renderers "
             "write it", names=_n("gpu1.example.org gpu2.example.org")),
    ListCase("a[1-2]b", None, ACCEPTS, why="text after the last bracket, as above",
             names=_n("a1b a2b")),
    ListCase("a[1-2]:4", None, ACCEPTS, why="':N' after a list gives its slots in ringtrain",
             names=_n("a1 a2")),
)


def test_corpus_is_well_formed():
    assert len(CORPUS) >= 15
    for case in CORPUS:
        assert bool(case.why) == (case.ringtrain != SAME), case.expr
        assert (case.names is not None) == (case.ringtrain == ACCEPTS), case.expr
        assert bool(case.error) == (case.slurm is None if case.ringtrain == SAME
                                    else case.ringtrain == REFUSES), case.expr


def ringtrain_names(expr: str) -> tuple[str, ...]:
    """The hosts of a nodelist file holding ``expr``; -H reads the same, but for spaces and
    empty items (refused in -H, as horovodrun refuses them)."""
    names = parse_nodelist(expr, "nodelist").names
    if " " not in expr and "" not in (item.strip() for item in expr.split(",")):
        assert parse_host_spec(expr).names == names
    return names


def expected_names(case: ListCase) -> tuple[str, ...] | None:
    if case.ringtrain == ACCEPTS:
        return case.names
    return None if case.ringtrain == REFUSES else case.slurm


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.expr)
def test_ringtrain_reads_the_corpus(case: ListCase):
    expected = expected_names(case)
    if expected is None:
        with pytest.raises(InventoryError) as info:
            ringtrain_names(case.expr)
        assert case.error in info.value.message and info.value.hint
        assert (info.value.line, info.value.column) == (1, 1)
    else:
        assert ringtrain_names(case.expr) == expected


def test_stepped_range_gets_its_own_message_and_the_list_to_write():
    with pytest.raises(InventoryError) as info:
        parse_host_spec("gpu[01-07:2]:4,cpu01")
    err = info.value
    assert "stepped range '01-07:2'" in err.message and "not a whole number" not in err.message
    assert err.hint == "list the numbers instead: gpu[01,03,05,07]"
    with pytest.raises(InventoryError, match="no steps") as info:
        parse_nodelist("io01\nn[1-9999:3]\n", "nl")
    assert (info.value.line, info.value.column) == (2, 1) and "e.g." in info.value.hint
    with pytest.raises(InventoryError, match="no steps") as info:
        parse_yaml_inventory('hosts: ["gpu[1-5:2]"]\n', "i.yaml")
    assert info.value.hint == "list the numbers instead: gpu[1,3,5]"


@pytest.mark.parametrize(
    "expr", ["gpu[01-04] gpu[05-08]", "gpu[01-04]:4 gpu[05-08]:2", "a[1-2]\tb[3]", "gpu01 gpu02"]
)
def test_space_separated_lists_are_detected_as_nodelists(expr, tmp_path):
    path = tmp_path / "hosts"
    path.write_text(expr + "\n")
    inventory = load_inventory(str(path))
    assert inventory.format == "nodelist"
    assert inventory.names == parse_nodelist(expr, "x").names


def test_compressed_lists_expand_back_in_slurm_order():
    names = ("gpu01", "gpu02", "gpu03", "gpu07", "n1.x", "n2.x", "io9", "io10")
    assert [n for e in compress(names) for n in expand(e)] == list(names)
