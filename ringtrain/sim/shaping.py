"""Link shaping for benchmarks: a token-bucket (``tc qdisc ... tbf``) on both ends of a host's veth.

The root-namespace end shapes what the host receives, the host's ``eth0`` what it sends, so each
simulated host gets a full-duplex link of ``rate`` in each direction behind a non-blocking
switch (the bridge), which is what the ring and parameter-server cost models assume::

    set_link_rate(cfg, "gpu01", "400mbit")   # both directions of gpu01's link
    set_link_rate(cfg, "gpu01", None)        # remove the shaping
    link_rate(cfg, "gpu01")                  # -> 400_000_000 (bits/s) or None

The bucket holds at least 128 KiB (veth passes GSO super-packets of up to 64 KiB plus headers;
a smaller bucket would split them) and 2 ms worth of tokens. Queues, as measured here (200mbit,
``ring_runner`` and ``ps_runner``, N = 2 and 4, 4 and 16 MiB):

* the host's ``eth0`` (its NIC) queues 2 ms: the host's own TCP sockets get backpressure. With a
  deep FIFO (50 ms) the ACKs of one direction waited behind the other direction's data, both
  flows saw the inflated RTT, and ring steps (both directions at once) took 1.3-1.6x their time
  in about half of the iterations; with 2 ms they ran at the payload rate (1448 of 1514 bytes
  per frame: 0.956 x the configured rate);
* the switch port into the host (the root-side end) queues 10 ms: N workers pushing to one PS
  shard at once (incast) need a buffer. With 2 ms, 256 KiB request/response RPCs lost their tail
  packets and waited for the 200 ms retransmission timeout (180 ms per RPC instead of 40); with
  50 ms a standing queue held the shard's ACKs back as above.
"""

from __future__ import annotations

import json
import logging
import re

from ringtrain.errors import SimError
from ringtrain.sim.cluster import cluster, require_root
from ringtrain.sim.config import SimConfig
from ringtrain.sim.proc import run

log = logging.getLogger(__name__)

_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
_UNITS = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}
MIN_BURST = 128 * 1024
NIC_QUEUE = "2ms"  # the host's eth0: its own TCP sockets see backpressure (TSQ)
PORT_QUEUE = "10ms"  # the switch port into the host: absorbs incast (N senders -> 1 host)


def parse_rate(rate: str) -> int:
    """``'400mbit'`` -> 400_000_000 bits/s (tc's decimal units: bit, kbit, mbit, gbit)."""
    m = _RATE_RE.match(rate.strip())
    if not m:
        raise SimError(f"link rate {rate!r} is not a number with bit, kbit, mbit or gbit",
                       hint="pass e.g. 400mbit or 1gbit")
    bits = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if not 8_000 <= bits <= 100_000_000_000:
        raise SimError(f"link rate {rate!r} is outside 8kbit..100gbit",
                       hint="pass a rate such as 100mbit, 400mbit or 1gbit")
    return bits


def tbf_args(rate_bits: int, queue: str = NIC_QUEUE) -> list[str]:
    burst = max(MIN_BURST, rate_bits // 8 // 500)  # 2 ms of tokens
    return ["tbf", "rate", f"{rate_bits}bit", "burst", str(burst), "latency", queue]


def _tc(netns: str | None, *args: str, check: bool = True) -> str:
    prefix = ["tc", "-n", netns] if netns else ["tc"]
    return run([*prefix, *args], check=check).stdout


def set_link_rate(cfg: SimConfig, host: str, rate: str | None) -> None:
    """Shape both directions of ``host``'s link to ``rate`` (tc units), or remove the shaping."""
    require_root()
    h = cluster(cfg).host(host)
    ends = ((None, h.veth, PORT_QUEUE), (h.netns, "eth0", NIC_QUEUE))
    for ns, dev, queue in ends:
        if rate is None:
            _tc(ns, "qdisc", "del", "dev", dev, "root", check=False)
        else:
            _tc(ns, "qdisc", "replace", "dev", dev, "root", *tbf_args(parse_rate(rate), queue))
    log.info("%s: link rate %s", host, rate or "unshaped")


def link_rate(cfg: SimConfig, host: str) -> int | None:
    """The tbf rate (bits/s) on ``host``'s root-side veth end, or None when unshaped."""
    h = cluster(cfg).host(host)
    for q in json.loads(_tc(None, "-j", "qdisc", "show", "dev", h.veth) or "[]"):
        if q.get("kind") == "tbf":
            return int(q.get("options", {}).get("rate", 0)) * 8  # tc -j reports bytes/s
    return None


def set_all_link_rates(cfg: SimConfig, rate: str | None) -> None:
    for host in cluster(cfg).names:
        set_link_rate(cfg, host, rate)
