"""Line-oriented host sources: what they accept, and the precise errors for what they do not."""

from __future__ import annotations

import pytest

from ringtrain.errors import InventoryError
from ringtrain.hostfile import (
    Host,
    parse_host_spec,
    parse_mpich_machinefile,
    parse_nodelist,
    parse_openmpi_hostfile,
    parse_pbs_nodefile,
    parse_slurm_env,
)


def _pairs(inv):
    return [(h.name, h.slots) for h in inv.hosts]


def test_openmpi_comments_blank_lines_tabs_and_keys():
    text = (
        "# cluster\n"
        "\n"
        "gpu01.example.org slots=4 max_slots=8   # trailing comment\n"
        "\tgpu02\tslots=2\n"
        "10.0.0.3\n"
        "fd00::4 slots=2\n"
        "[fd00::5] slots=1\n"
    )
    inv = parse_openmpi_hostfile(text, "hf")
    assert inv.hosts[0] == Host("gpu01.example.org", 4, max_slots=8)
    assert _pairs(inv)[1:] == [("gpu02", 2), ("10.0.0.3", 1), ("fd00::4", 2), ("fd00::5", 1)]
    assert inv.format == "openmpi" and inv.source == "hf"


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("gpu01 slots=4\ngpu01 slots=2\n", 2, 7, ["listed twice", "line 1", "repeated host"]),
        ("gpu01 slots=0\n", 1, 7, ["at least 1"]),
        ("gpu01 slots=-3\n", 1, 7, ["not a whole number"]),
        ("gpu01 slots=four\n", 1, 7, ["not a whole number"]),
        ("gpu01 slots=4 colour=red\n", 1, 15, ["unknown key 'colour'"]),
        ("gpu01 slots=4 slots=5\n", 1, 15, ["given twice"]),
        ("gpu01 4\n", 1, 7, ["unexpected '4'"]),
        ("  gpu;rm slots=1\n", 1, 3, ["';'"]),
        ("gpu$(id) slots=1\n", 1, 1, ["'$'"]),
        ("-oProxyCommand=x slots=1\n", 1, 1, ["starts with '-'"]),
        ("gpu01:4\n", 1, 1, ["MPICH"]),
        ("gpu01 slots=4 max_slots=2\n", 1, 1, ["max_slots=2 is less than slots=4"]),
        ("# nothing\n\n", None, None, ["no hosts found"]),
    ],
)
def test_openmpi_errors_name_line_and_column(text, line, column, words):
    with pytest.raises(InventoryError) as info:
        parse_openmpi_hostfile(text, "hosts.txt")
    err = info.value
    assert (err.source, err.line, err.column) == ("hosts.txt", line, column)
    for word in words:
        assert word in err.message
    assert err.hint
    if line is not None:
        assert str(err).startswith(f"hosts.txt:{line}:{column}: ")


def test_mpich_machinefile():
    inv = parse_mpich_machinefile("gpu01:4\n# c\ngpu02\n[fd00::1]:2\n  gpu03:1  \n", "mf")
    assert _pairs(inv) == [("gpu01", 4), ("gpu02", 1), ("fd00::1", 2), ("gpu03", 1)]
    assert inv.format == "mpich"


@pytest.mark.parametrize(
    ("text", "line", "column", "word"),
    [
        ("gpu01:4 extra\n", 1, 9, "unexpected 'extra'"),
        ("gpu01:x\n", 1, 1, "not a whole number"),
        ("gpu01:0\n", 1, 1, "at least 1"),
        ("ok:1\ngpu 01:2\n", 2, 5, "unexpected '01:2'"),
        ("gpu01:4:2\n", 1, 1, "neither NAME:SLOTS nor an IPv6"),
        ("gpu[01-02]:4\n", 1, 1, "not allowed"),
        ("[10.0.0.1]:2\n", 1, 1, "neither NAME:SLOTS nor an IPv6"),
    ],
)
def test_mpich_errors(text, line, column, word):
    with pytest.raises(InventoryError) as info:
        parse_mpich_machinefile(text, "mf")
    assert (info.value.line, info.value.column) == (line, column)
    assert word in info.value.message


def test_host_spec_horovod_style():
    inv = parse_host_spec("gpu01:4, gpu02:4,[::1]:2,localhost")
    assert _pairs(inv) == [("gpu01", 4), ("gpu02", 4), ("::1", 2), ("localhost", 1)]
    assert inv.source == "-H" and inv.format == "horovod"


def test_host_spec_accepts_slurm_host_lists():
    inv = parse_host_spec("gpu[01-03,07]:4,cpu01:1")
    assert inv.names == ("gpu01", "gpu02", "gpu03", "gpu07", "cpu01")
    assert [h.slots for h in inv.hosts] == [4, 4, 4, 4, 1]


@pytest.mark.parametrize(
    ("spec", "column", "word"),
    [
        ("gpu01:4,,gpu02:4", 9, "empty host entry"),
        ("gpu01:4,gpu01:2", 9, "listed twice"),
        ("gpu01:4,gpu[3-1]:2", 9, "start > stop"),
        ("gpu01:4,gpu[01-02:2", 9, "bad host list"),
        ("a:1,b c:2", 5, "' '"),
        ("a:1,gpu[1-2],gpu2", 14, "listed twice"),
    ],
)
def test_host_spec_errors(spec, column, word):
    with pytest.raises(InventoryError) as info:
        parse_host_spec(spec)
    assert (info.value.source, info.value.line, info.value.column) == ("-H", 1, column)
    assert word in info.value.message


def test_nodelist_expressions_separators_and_slots():
    text = "# rack 1\ngpu[01-02,07]:4 cpu[1-2]\nio01,  [fd00::9]:2\n"
    inv = parse_nodelist(text, "nl")
    assert _pairs(inv) == [
        ("gpu01", 4), ("gpu02", 4), ("gpu07", 4), ("cpu1", 1), ("cpu2", 1),
        ("io01", 1), ("fd00::9", 2),
    ]


def test_nodelist_huge_range_is_refused_not_expanded():
    with pytest.raises(InventoryError) as info:
        parse_nodelist("n[1-99999999999]\n", "nl")
    assert "range too large" in info.value.message
    with pytest.raises(InventoryError, match="more than"):
        parse_nodelist("n[1-200][1-200]\n", "nl")


def test_nodelist_error_column_points_at_item():
    with pytest.raises(InventoryError) as info:
        parse_nodelist("gpu01\ngpu02 gpu[5-x]\n", "nl")
    assert (info.value.line, info.value.column) == (2, 7)


def test_pbs_nodefile_counts_repeats_in_first_seen_order():
    text = "nodeB\nnodeB\nnodeA\nnodeB\nnodeA\n\n"
    inv = parse_pbs_nodefile(text, "$PBS_NODEFILE")
    assert _pairs(inv) == [("nodeB", 3), ("nodeA", 2)]
    assert inv.format == "pbs"


def test_pbs_nodefile_errors():
    with pytest.raises(InventoryError) as info:
        parse_pbs_nodefile("nodeA\nnodeA slots=2\n", "nf")
    assert (info.value.line, info.value.column) == (2, 7)
    with pytest.raises(InventoryError, match="no hosts"):
        parse_pbs_nodefile("\n\n", "nf")


def test_slurm_env():
    inv = parse_slurm_env("gpu[01-03],cpu01", "4(x2),2,1")
    assert _pairs(inv) == [("gpu01", 4), ("gpu02", 4), ("gpu03", 2), ("cpu01", 1)]
    with pytest.raises(InventoryError, match="3 task counts for 4 nodes"):
        parse_slurm_env("gpu[01-03],cpu01", "4(x2),2")
    with pytest.raises(InventoryError, match="cannot read"):
        parse_slurm_env("gpu01", "4x")


@pytest.mark.parametrize(
    "name",
    ["gpu01", "gpu-01.rack1.example.com", "GPU_01", "10.1.2.3", "fe80::1", "fe80::1%eth0",
     "2001:db8::8a2e:370:7334", "node.", "a" * 63],
)
def test_valid_host_names(name):
    assert parse_host_spec(f"[{name}]:1" if ":" in name else name).names == (name,)


@pytest.mark.parametrize(
    "name",
    ["gpu 01", "gpu;01", "gpu|x", "gpu&", "a`b`", "gpu$x", "x>y", "gpu'1", 'g"1', "gpu\\1",
     "-x", "a..b", "a" * 64, "fe80::1%eth0;x", "gpu\u00e9", "*", "gpu!"],
)
def test_hostile_host_names_are_rejected(name):
    with pytest.raises(InventoryError) as info:
        parse_openmpi_hostfile(f"ok slots=1\n{name} slots=1\n", "hf")
    assert info.value.line == 2
    assert info.value.hint


def test_validators_refuse_a_trailing_newline() -> None:
    """Issue 23: `^...$` let "gpu01\\n" through (Python's $ matches before a final newline),
    and a host name with a newline splits a hostfile line in two."""
    import pytest as _pytest

    from ringtrain.errors import UsageError
    from ringtrain.hostfile.model import host_name_problem
    from ringtrain.rank.reaper import RUN_ID_RE
    from ringtrain.spec import EnvSpec

    assert host_name_problem("gpu01") is None
    assert host_name_problem("gpu01\n") is not None
    assert RUN_ID_RE.match("20261125-010203-ab12") and not RUN_ID_RE.match("r1\n")
    with _pytest.raises(UsageError):
        EnvSpec.parse("NAME\n=1")
