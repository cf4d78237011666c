"""Open MPI hostfiles: a corpus of forms, each with where Open MPI 4.1's mpirun puts the ranks.

``OPENMPI`` is what ``mpirun --hostfile F -np <all slots> --map-by slot --display-map`` does with
the file (Open MPI 4.1.4), as ``(node, slots)`` in mapping order, or None when mpirun refuses
the file. tests/integration/test_inventory_oracles.py checks every entry against mpirun itself
and ringtrain against mpirun directly; these unit tests pin ringtrain's side without mpirun.

Names are compared as Open MPI shows them: without their domain (``n1.rack.invalid`` is ``n1``),
and the launching machine as ``localhost``. The addresses are 127.0.0.2 and up (not this
machine's to Open MPI, never looked up in DNS) and 2001:db8::/32 (documentation range).

Where ringtrain deliberately differs, ``ringtrain`` says how and ``why`` says why;
docs/INVENTORIES.md lists the same differences.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ringtrain.errors import InventoryError
from ringtrain.hostfile import Host, allocate, load_inventory, parse_openmpi_hostfile
from ringtrain.hostfile.openmpi import node_key
from tests.golden import assert_golden

SAME = "same"  # ringtrain reads the file as Open MPI does (both accept, or both refuse)
REFUSES = "refuses"  # Open MPI accepts the file; ringtrain refuses it on purpose
ACCEPTS = "accepts"  # Open MPI refuses the file; ringtrain reads it on purpose


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    openmpi: tuple[tuple[str, int], ...] | None  # Open MPI's nodes and slots; None: refused
    ringtrain: str = SAME
    error: str = ""  # words in ringtrain's error, when it refuses
    why: str = ""  # the reason for a deliberate difference
    placed: tuple[tuple[str, int], ...] | None = None  # ringtrain's, when it ACCEPTS
    detected: tuple[tuple[str, int], ...] | None = None  # ringtrain's, if detection differs


CORPUS = (
    Case("slots", "127.0.0.2 slots=2\n127.0.0.3 slots=3\n",
         (("127.0.0.2", 2), ("127.0.0.3", 3))),
    Case("default_one_slot", "127.0.0.2\n127.0.0.3 slots=2\n127.0.0.4\n",
         (("127.0.0.2", 1), ("127.0.0.3", 2), ("127.0.0.4", 1))),
    Case("max_slots_alone_is_the_slots", "127.0.0.2 max_slots=4\n127.0.0.3\n",
         (("127.0.0.2", 4), ("127.0.0.3", 1))),
    Case("max_slots_spellings",
         "127.0.0.2 slots_max=3\n127.0.0.3 max-slots=2\n127.0.0.4 max_count=2\n"
         "127.0.0.5 cpu-max=2\n",
         (("127.0.0.2", 3), ("127.0.0.3", 2), ("127.0.0.4", 2), ("127.0.0.5", 2))),
    Case("slots_and_max_slots_either_order",
         "127.0.0.2 slots=2 max_slots=4\n127.0.0.3 max_slots=3 slots=1\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("count_and_cpu_are_slots", "127.0.0.2 count=3\n127.0.0.3 cpu=2\n",
         (("127.0.0.2", 3), ("127.0.0.3", 2))),
    Case("repeated_lines_add_a_slot_each", "127.0.0.2\n127.0.0.3\n127.0.0.2\n127.0.0.2\n",
         (("127.0.0.2", 3), ("127.0.0.3", 1))),
    Case("repeat_after_slots_adds_one", "127.0.0.2 slots=2\n127.0.0.3\n127.0.0.2\n",
         (("127.0.0.2", 3), ("127.0.0.3", 1))),
    Case("repeat_may_raise_max_slots", "127.0.0.2 slots=2\n127.0.0.2 max_slots=6\n",
         (("127.0.0.2", 3),)),
    Case("repeat_with_slots", "127.0.0.2 slots=2\n127.0.0.3\n127.0.0.2 slots=3\n", None,
         error="listed twice (first at line 1, column 1)"),
    Case("repeat_then_slots", "127.0.0.2\n127.0.0.2 slots=2\n", None, error="listed twice"),
    Case("spaces_around_equals", "127.0.0.2 slots = 2\n127.0.0.3 slots= 3 max_slots =4\n",
         (("127.0.0.2", 2), ("127.0.0.3", 3))),
    Case("tabs_blank_lines_indent", "\t127.0.0.2\tslots=2\t\n\n   \n  127.0.0.3  slots=1\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("comments", "# head\n127.0.0.2 slots=2 # tail\n127.0.0.3 slots=1#tight\n"
         "// c++ style\n127.0.0.4 // trailing\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1), ("127.0.0.4", 1))),
    Case("block_comments", "/* first\n127.0.0.9 slots=8\n*/\n127.0.0.2 slots=2\n"
         "127.0.0.3 slots=1 /* trailing */\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("block_comment_ends_the_line", "127.0.0.2 /* why */ slots=2\n", None,
         error="starts with 'slots'"),
    Case("no_trailing_newline", "127.0.0.2 slots=2\n127.0.0.3",
         (("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("user_at_host", "bob@127.0.0.2 slots=2\nal@127.0.0.3\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("username_keys", "127.0.0.2 slots=2 username=bob\n127.0.0.3 user_name=al\n"
         "127.0.0.4 user-name=cy slots=1\n",
         (("127.0.0.2", 2), ("127.0.0.3", 1), ("127.0.0.4", 1))),
    Case("user_key", "127.0.0.2 user=bob\n", None, error="does not accept 'user'"),
    Case("slot_key", "127.0.0.2 slot=2\n", None, error="does not accept 'slot'"),
    Case("cpus_key", "127.0.0.2 cpus=2\n", None, error="does not accept 'cpus'"),
    Case("boards_key", "127.0.0.2 boards=2\n", None, error="unknown key 'boards'"),
    Case("slots_not_a_number", "127.0.0.2 slots=2x\n", None, error="not a whole number"),
    Case("slots_without_value", "127.0.0.2 slots=\n", None, error="has no value"),
    Case("slots_given_twice", "127.0.0.2 slots=2 slots=3\n", None, error="given twice"),
    Case("max_slots_below_slots", "127.0.0.2 slots=2 max_slots=1\n", None,
         error="max_slots=1 is less than slots=2"),
    Case("leading_zeros", "127.0.0.2 slots=02\n", (("127.0.0.2", 2),)),
    Case("ipv6", "2001:db8::5 slots=2\n127.0.0.2\n", (("2001:db8::5", 2), ("127.0.0.2", 1))),
    Case("launching_machine_goes_first", "127.0.0.2 slots=1\nlocalhost slots=2\n127.0.0.3\n",
         (("localhost", 2), ("127.0.0.2", 1), ("127.0.0.3", 1))),
    Case("same_fqdn_repeated", "n1.rack.invalid\nn1.rack.invalid\n127.0.0.2\n",
         (("n1", 2), ("127.0.0.2", 1))),
    Case("only_comments", "# nothing\n\n", None, error="no hosts found"),
    # Read by Open MPI, refused by ringtrain on purpose.
    Case("slots_zero", "127.0.0.2 slots=0\n127.0.0.3 slots=2\n", (("127.0.0.3", 2),),
         REFUSES, "at least 1, got 0",
         "a host with slots=0 gets no rank: leaving the line out says so"),
    Case("stray_word", "127.0.0.2 4\n127.0.0.3\n", (("127.0.0.2", 1), ("127.0.0.3", 1)),
         REFUSES, "unexpected '4'",
         "Open MPI ignores words that are not key=value: '4' looks like slots, and gives 1"),
    Case("mpich_syntax", "127.0.0.2:2\n127.0.0.3\n", (("127.0.0.2", 1), ("127.0.0.3", 1)),
         REFUSES, "MPICH machinefile syntax",
         "Open MPI reads '127.0.0.2:2' as 127.0.0.2 with 1 slot and ignores ':2'; detected, "
         "the file is an MPICH machinefile, where it means 2 slots",
         detected=(("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("max_slots_before_lower_slots", "127.0.0.2 max_slots=1 slots=2\n",
         (("127.0.0.2", 2),), REFUSES, "max_slots=1 is less than slots=2",
         "Open MPI silently raises max_slots to 2 here, but refuses the same line the other "
         "way round"),
    Case("max_slots_given_twice", "127.0.0.2 max_slots=4 max_slots=5\n", (("127.0.0.2", 5),),
         REFUSES, "given twice", "Open MPI keeps the last; two values are a mistake"),
    Case("repeat_above_max_slots", "127.0.0.2 max_slots=2\n127.0.0.2\n", (("127.0.0.2", 3),),
         REFUSES, "max_slots=2 is less than slots=3",
         "Open MPI ends with 3 slots and max_slots=2, a host over its own hard limit"),
    Case("localhost_twice_by_two_names", "localhost\n127.0.0.1\n", (("localhost", 2),),
         REFUSES, "both name the launching machine",
         "Open MPI merges every name of the launching machine into one node"),
    Case("two_domains_one_short_name", "n1.a.invalid slots=2\nn1.b.invalid\n", (("n1", 3),),
         REFUSES, "one host to Open MPI",
         "Open MPI drops domains, so two machines named n1 become one node with 3 slots"),
    Case("unterminated_block_comment", "127.0.0.2 slots=2\n/* never closed\n127.0.0.3\n",
         (("127.0.0.2", 2),), REFUSES, "never closed",
         "Open MPI silently drops every host after an unclosed /*"),
    Case("exclusion_line", "127.0.0.2\n127.0.0.3\n^127.0.0.3\n",
         (("127.0.0.2", 1), ("127.0.0.3", 1)), REFUSES, "excluded (^host)",
         "mpirun reports a parse error for the ^ line and then maps every host anyway: ^host "
         "excludes only from a resource manager's hosts"),
    # Refused by Open MPI, read by ringtrain on purpose.
    Case("crlf_line_ends", "127.0.0.2 slots=2\r\n127.0.0.3\r\n", None, ACCEPTS,
         why="a file saved on Windows means the same hosts; ringtrain writes its own hostfile "
         "for mpirun", placed=(("127.0.0.2", 2), ("127.0.0.3", 1))),
    Case("bracketed_ipv6", "[2001:db8::5] slots=2\n127.0.0.2\n", None, ACCEPTS,
         why="[IPv6] is how every other format writes an address; ringtrain writes its own "
         "hostfile for mpirun", placed=(("2001:db8::5", 2), ("127.0.0.2", 1))),
)
CASES = {c.name: c for c in CORPUS}


def canonical(name: str) -> str:
    """A host name as Open MPI shows it: the launching machine as localhost, no domain."""
    return node_key(name)


def ranks_of(nodes: tuple[tuple[str, int], ...]) -> list[str]:
    return [name for name, slots in nodes for _ in range(slots)]


def ringtrain_ranks(path: str, np: int | None = None, fmt: str | None = None) -> list[str]:
    """Where ``ringtrain hosts PATH -np NP`` puts each rank (names as Open MPI shows them)."""
    alloc = allocate(load_inventory(path, fmt), np)
    return [canonical(r.host) for r in alloc.ranks]


def expected_ranks(case: Case, *, detected: bool = False) -> list[str] | None:
    """ringtrain's placement for all slots; None when it refuses the file."""
    if detected and case.detected is not None:
        return ranks_of(case.detected)
    if case.ringtrain == REFUSES or (case.ringtrain == SAME and case.openmpi is None):
        return None
    nodes = case.placed if case.ringtrain == ACCEPTS else case.openmpi
    assert nodes is not None
    return ranks_of(nodes)


def test_corpus_is_well_formed():
    assert len(CASES) == len(CORPUS) >= 15
    for case in CORPUS:
        assert case.ringtrain in (SAME, REFUSES, ACCEPTS)
        assert bool(case.why) == (case.ringtrain != SAME), case.name
        assert (case.placed is not None) == (case.ringtrain == ACCEPTS), case.name
        if case.ringtrain == SAME:
            assert (case.openmpi is None) == bool(case.error), case.name
        else:
            assert (case.openmpi is None) == (case.ringtrain == ACCEPTS), case.name
            assert bool(case.error) == (case.ringtrain == REFUSES), case.name


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
@pytest.mark.parametrize("fmt", [None, "openmpi"], ids=["detected", "forced"])
def test_ringtrain_reads_the_corpus(case: Case, fmt: str | None, tmp_path: Path):
    path = tmp_path / "hostfile"
    path.write_bytes(case.text.encode())
    expected = expected_ranks(case, detected=fmt is None)
    if expected is None:
        with pytest.raises(InventoryError) as info:
            ringtrain_ranks(str(path), fmt=fmt)
        err = info.value
        assert case.error in err.message and err.hint, (err.message, err.hint)
        assert err.source == str(path) and (err.line is not None or "no hosts" in err.message)
    else:
        assert ringtrain_ranks(str(path), fmt=fmt) == expected


def test_user_names_are_kept():
    inv = parse_openmpi_hostfile(CASES["user_at_host"].text, "hf")
    assert [(h.name, h.user) for h in inv.hosts] == [("127.0.0.2", "bob"), ("127.0.0.3", "al")]
    inv = parse_openmpi_hostfile(CASES["username_keys"].text, "hf")
    assert [h.user for h in inv.hosts] == ["bob", "al", "cy"]


def test_max_slots_alone_keeps_its_limit():
    inv = parse_openmpi_hostfile(CASES["max_slots_alone_is_the_slots"].text, "hf")
    assert inv.hosts[0] == Host("127.0.0.2", 4, max_slots=4)
    inv = parse_openmpi_hostfile(CASES["repeat_may_raise_max_slots"].text, "hf")
    assert inv.hosts == (Host("127.0.0.2", 3, max_slots=6),)


def test_corpus_readings_golden():
    """Every reading and every error with its fix, for review in one place."""
    parts = []
    for case in CORPUS:
        shown = case.text.replace("\r", "\\r").replace("\t", "\\t")
        parts.append(f"== {case.name} ({case.ringtrain})\n{shown}".rstrip("\n") + "\n--\n")
        try:
            inv = parse_openmpi_hostfile(case.text, "hostfile")
        except InventoryError as err:
            parts.append(f"error: {err}\nfix: {err.hint}\n\n")
            continue
        for h in inv.hosts:
            extra = "".join(
                f" {k}={v}" for k, v in (("max_slots", h.max_slots), ("user", h.user)) if v
            )
            parts.append(f"{h.name} slots={h.slots}{extra}\n")
        parts.append("\n")
    assert_golden("hostfile_corpus/openmpi.txt", "".join(parts))
