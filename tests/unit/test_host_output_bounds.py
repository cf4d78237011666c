"""What a host prints is parsed in time proportional to its size (issue 40 item 5): lines cut
before any pattern sees them, and no pattern that reads the rest of the text again from each
place it could start. The tests check that shape (where each pattern runs, and how often);
the 156 KiB timings are printed, never asserted."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ringtrain.checkpoint import hdfs_errors
from ringtrain.probe import doctor_parse, probe_parse
from ringtrain.probe.sections import BEGIN, END, HEADER, MAX_LINE, split_sections

BIG = 156 * 1024


class _Spy:
    """A compiled pattern that records each call's (method, pos, endpos)."""

    def __init__(self, pattern: Any) -> None:
        self.pattern, self.calls = pattern, []  # type: ignore[var-annotated]

    def match(self, text: str, pos: int = 0, endpos: int = 2**62) -> Any:
        self.calls.append(("match", pos, min(endpos, len(text))))
        return self.pattern.match(text, pos, endpos)

    def search(self, text: str, pos: int = 0, endpos: int = 2**62) -> Any:
        self.calls.append(("search", pos, min(endpos, len(text))))
        return self.pattern.search(text, pos, endpos)


def _timed(what: str, fn: Any, *args: Any) -> Any:
    start = time.perf_counter()
    out = fn(*args)
    print(f"{what}: {time.perf_counter() - start:.4f} s")
    return out


def test_every_line_of_a_probe_section_is_cut_before_it_is_parsed() -> None:
    text = f"{HEADER}\n{BEGIN}xid@@\n{'[ 1.0] ' * (BIG // 7)}\nshort\n{END}0@@\n"
    body = _timed("split 156 KiB", split_sections, text)["xid"].body
    assert [len(line) for line in body.splitlines()] == [MAX_LINE, 5]


def test_an_xid_line_is_matched_once_from_its_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: a 156 KiB line took 14 s (two lazy wildcards before the mark); under
    --elastic one rested spare's re-check held the GIL and stopped the heartbeats. Now the
    mark is found by str.find and the pattern runs once, anchored there; the time is looked
    for before the mark only."""
    xid, clock = _Spy(doctor_parse._XID_RE), _Spy(doctor_parse._TIME_RE)
    monkeypatch.setattr(doctor_parse, "_XID_RE", xid)
    monkeypatch.setattr(doctor_parse, "_TIME_RE", clock)
    line = "kern  :err   : [ 4242.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen off the bus"
    got = doctor_parse.read_xid(line)
    at = line.index("NVRM")
    assert got is not None and (got.code, got.bus, got.uptime_s) == (79, "3b:00", 4242.5)
    assert xid.calls == [("match", at, len(line))] and clock.calls == [("search", 0, at)]
    xid.calls.clear()
    hostile = "[ 1.0] " * (BIG // 7)  # no mark: no pattern runs at all
    assert _timed("156 KiB xid line", doctor_parse.parse_xid, hostile, 0)[0] == ()
    assert xid.calls == []
    far = "[ " * (BIG // 2) + line  # the mark far out: one match, from the mark
    assert doctor_parse.read_xid(far) is not None
    assert xid.calls == [("match", far.index("NVRM"), len(far))]


def test_the_xid_patterns_have_no_leading_wildcard() -> None:
    assert doctor_parse._XID_RE.pattern.startswith(doctor_parse.XID_MARK.replace("(", "\\("))
    assert ".*" not in doctor_parse._TIME_RE.pattern


def test_an_mpi_version_is_read_from_its_first_mark_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: "Intel(R) MPI Library.*?Version" read the rest of the text again from every
    mark (10 s for 160 KB of them). Now each version pattern runs once, from the first mark."""
    spies = [(mark, _Spy(p), label) for mark, p, label in probe_parse._MPI_VERSIONS]
    monkeypatch.setattr(probe_parse, "_MPI_VERSIONS", tuple(spies))
    for mark in ("Intel(R) MPI Library ", "HYDRA build details:"):
        hostile = mark * (BIG // len(mark))
        assert _timed(f"156 KiB of {mark!r}", probe_parse.parse_mpirun_version,
                      hostile, 0) == f"unknown ({hostile[:60]})"
    assert [len(spy.calls) for _, spy, _ in spies] == [0, 1, 1]
    assert all(call[0] == "match" for _, spy, _ in spies for call in spy.calls)
    real = "Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227"
    assert probe_parse.parse_mpirun_version(real, 0) == "Intel MPI 2021.6"


def test_datanodes_are_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    ip, port = _Spy(hdfs_errors._IP_ADDR), _Spy(hdfs_errors._XFER_PORT)
    monkeypatch.setattr(hdfs_errors, "_IP_ADDR", ip)
    monkeypatch.setattr(hdfs_errors, "_XFER_PORT", port)
    text = ('ip_addr: \\"10.0.0.5\\", x, xfer_port: 9866 ip_addr: \\"10.0.0.6\\", '
            'xfer_port: 9867 ' + 'ip_addr: "1" ' * (BIG // 13))
    assert _timed("156 KiB of ip_addr", hdfs_errors.datanodes, text) == [
        ("10.0.0.5", "9866"), ("10.0.0.6", "9867")]
    assert len(ip.calls) == 3 and len(port.calls) == 3  # the last one looks once, to the end
