"""Which host or link is slow, from the pair matrix. Pure.

A ring all-reduce runs at the pace of its slowest link, so one bad host costs the whole job.
Every pair (a, b) was measured (``schedule.py``); each pair's bandwidth is compared with a
reference: the expected link rate when given (``--expect-link``), else the median over hosts
of each host's best pair (robust while fewer than half the hosts are slow: every healthy host
has a fast pair, even with 3 hosts where most pairs touch the slow one).
A pair is slow below ``slow_ratio`` of the reference. What the slow pairs share names the
culprit: a host most of whose pairs are slow (with at least 3 hosts) is a slow host, and its
pairs are explained by it; a slow pair left over is a slow link between two healthy hosts.
With two hosts a slow pair cannot be pinned on either host: it is reported as a link.
Robust spread (MAD) goes in the report so a user can tell noise from a real outlier.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from ringtrain.errors import UsageError

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|b)(?:/s|ps)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_link_rate(text: str) -> float:
    """``25gbit`` (or ``25Gbit/s``, ``100mbit``, ``3GB/s``) -> bytes per second."""
    m = _RATE_RE.match(text)
    if not m:
        raise UsageError(f"--expect-link {text!r} is not a link rate",
                         "write it as a number and a unit: 25gbit, 100mbit, 3GB/s")
    value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    bytes_per_s = value if m.group(3) == "B" else value / 8  # B: bytes; bit or b: bits
    if bytes_per_s <= 0:
        raise UsageError(f"--expect-link {text!r} is zero", "give the link's rate, e.g. 25gbit")
    return bytes_per_s


@dataclass(frozen=True, slots=True)
class Pair:
    a: int
    b: int
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class HostScore:
    host: str
    median_Bps: float
    slow_pairs: int
    pairs: int
    slow: bool


@dataclass(frozen=True, slots=True)
class RingVerdict:
    hosts: tuple[str, ...]
    reference_Bps: float
    reference_kind: str  # "expected" (--expect-link) or "median of host bests"
    mad_Bps: float
    scores: tuple[HostScore, ...]
    slow_hosts: tuple[str, ...]
    slow_links: tuple[tuple[str, str, float], ...]  # (a, b, bandwidth) between healthy hosts
    ring_busbw_Bps: float | None = None
    notes: tuple[str, ...] = field(default=())
    slow_ratio: float = 0.5

    @property
    def healthy(self) -> bool:
        return not self.slow_hosts and not self.slow_links

    def describe(self) -> list[str]:
        ref = f"{rate(self.reference_Bps)} ({self.reference_kind})"
        lines = []
        for s in self.scores:
            if s.slow:
                lines.append(f"slow host {s.host}: median {rate(s.median_Bps)} over its "
                             f"{s.pairs} pairs, {s.slow_pairs} of them below the threshold; "
                             f"reference {ref}")
        for a, b, bw in self.slow_links:
            lines.append(f"slow link {a} <-> {b}: {rate(bw)}; reference {ref} (both hosts are "
                         "fast with every other host)")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts), "reference_Bps": self.reference_Bps,
            "reference_kind": self.reference_kind, "mad_Bps": self.mad_Bps,
            "slow_hosts": list(self.slow_hosts),
            "slow_links": [{"a": a, "b": b, "bandwidth_Bps": bw} for a, b, bw in self.slow_links],
            "ring_busbw_Bps": self.ring_busbw_Bps, "notes": list(self.notes),
            "slow_ratio": self.slow_ratio,
            "scores": [{"host": s.host, "median_Bps": s.median_Bps, "slow_pairs": s.slow_pairs,
                        "pairs": s.pairs, "slow": s.slow} for s in self.scores],
        }


def analyse(
    hosts: tuple[str, ...],
    pairs: list[Pair],
    *,
    expect_Bps: float | None = None,
    slow_ratio: float = 0.5,
    ring_busbw_Bps: float | None = None,
) -> RingVerdict:
    if not pairs:
        return RingVerdict(hosts, 0.0, "none", 0.0, (), (), (), ring_busbw_Bps,
                           ("one host: no link to measure",))
    values = [p.bandwidth_Bps for p in pairs]
    per_host: dict[int, list[Pair]] = {i: [] for i in range(len(hosts))}
    for p in pairs:
        per_host[p.a].append(p)
        per_host[p.b].append(p)
    best = statistics.median(max(q.bandwidth_Bps for q in own) for own in per_host.values() if own)
    mad = statistics.median(abs(v - best) for v in values)
    reference, kind = (expect_Bps, "expected") if expect_Bps else (best, "median of host bests")
    threshold = slow_ratio * reference
    slow = [p for p in pairs if p.bandwidth_Bps < threshold]
    scores = []
    slow_host_ids: set[int] = set()
    for i, own in per_host.items():
        n_slow = sum(p.bandwidth_Bps < threshold for p in own)
        # a host is the common factor when most of its pairs are slow; with 2 hosts nothing
        # tells which end is at fault
        is_slow = len(hosts) >= 3 and n_slow * 2 > len(own)
        if is_slow:
            slow_host_ids.add(i)
        scores.append(HostScore(hosts[i], statistics.median(p.bandwidth_Bps for p in own)
                                if own else 0.0, n_slow, len(own), is_slow))
    links = tuple((hosts[p.a], hosts[p.b], p.bandwidth_Bps) for p in slow
                  if p.a not in slow_host_ids and p.b not in slow_host_ids)
    notes = []
    if expect_Bps is None and len(hosts) >= 3 and len(slow_host_ids) * 2 >= len(hosts):
        notes.append("half the hosts or more are slow against the median: the median itself "
                     "may be the slow rate; pass --expect-link to compare with the link's rate")
    return RingVerdict(hosts, reference, kind, mad, tuple(scores),
                       tuple(hosts[i] for i in sorted(slow_host_ids)), links, ring_busbw_Bps,
                       tuple(notes), slow_ratio)


def rate(bps: float) -> str:
    """Bytes per second as a link rate (bits, decimal units, as links are sold)."""
    bits = bps * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.2f} {unit}"
    return f"{bits:.0f} bit/s"
