"""Benchmark: ``check --ring`` wall time vs host count, and how reliably it names a slow host.

Brings up one simulated cluster of the largest size (root needed), shapes every link to
``--rate`` and, for each size N, ``--repeats`` times: one host picked at random drops to a
quarter of the rate, the ring check runs over the first N hosts (through the real launch
Session, mpirun and SSH), and it must name exactly that host; then once more with every link
equal, where it must name nobody. Prints per size the wall time (median), the pair phase's
share, the rounds (goal: N-1 rounds per pass, not N(N-1)/2), hosts named right and false alarms.

    python -m ringtrain.bench.launcher.ringcheck_scaling [--sizes 4,8,16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

from ringtrain import sim
from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.reporter import NullReporter
from ringtrain.remote.ssh import SshRemote
from ringtrain.ringcheck.runner import RingCheckOptions, run_ring_check
from ringtrain.sim import shaping
from ringtrain.spec import SshSpec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rate", default="400mbit")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    slow_rate = f"{shaping.parse_rate(args.rate) // 4}bit"
    rng = random.Random(args.seed)  # noqa: S311 - picks a test host, not a secret
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="rt-ring-bench-") as tmp:
        cfg = sim.SimConfig(name="rbench", hosts=max(sizes), state_dir=Path(tmp) / "sim")
        cluster = sim.up(cfg)
        try:
            shaping.set_all_link_rates(cluster.config, args.rate)
            remote = SshRemote(cluster.ssh_config, cluster.known_hosts)
            opts = RingCheckOptions(runs_dir=Path(tmp) / "runs",
                                    ssh=SshSpec(cluster.ssh_config, cluster.known_hosts))
            print(f"links {args.rate}, slow host {slow_rate}; {args.repeats} slow-host trials "
                  "and 1 healthy trial per size", flush=True)
            for n in sizes:
                names = cluster.names[:n]
                inventory = Inventory(tuple(Host(h, 1) for h in names), source=f"sim {n}")
                walls, pair_s, right = [], [], 0
                rounds = 0
                for _ in range(args.repeats):
                    culprit = rng.choice(names)
                    shaping.set_link_rate(cluster.config, culprit, slow_rate)
                    started = time.perf_counter()
                    check = run_ring_check(inventory, remote, opts, NullReporter())
                    walls.append(time.perf_counter() - started)
                    shaping.set_link_rate(cluster.config, culprit, args.rate)
                    pair_s.append(check.raw["pairs_s"])
                    rounds = check.raw["rounds"]
                    right += check.verdict.slow_hosts == (culprit,)
                healthy = run_ring_check(inventory, remote, opts, NullReporter())
                false_alarms = len(healthy.verdict.slow_hosts) + len(healthy.verdict.slow_links)
                print(f"{n:3d} hosts: {rounds} rounds x 2 passes, {n * (n - 1) // 2} pairs; wall "
                      f"median {statistics.median(walls):.1f} s (pair phase "
                      f"{statistics.median(pair_s):.1f} s); slow host named {right}/"
                      f"{args.repeats}; false alarms on equal links {false_alarms}", flush=True)
        finally:
            sim.down(cluster.config, purge=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
