"""Benchmark: pre-flight wall time vs host count, ringtrain's probe next to horovodrun's SSH check.

Brings up one simulated cluster of the largest size (root needed), then for 1, 4, 16 and 32 hosts
times, alternately and ``--repeats`` times each:

* ``ringtrain.probe.hostprobe.probe``: one SSH round trip per host collecting nvidia-smi, versions
  and interfaces, strict host keys, up to 64 hosts at once;
* horovodrun's own check, ``horovod.runner.launch._check_all_hosts_ssh_successful``: one
  ``ssh ... true`` per host in threads. It runs plain ``ssh``; a wrapper first on PATH adds
  ``-F <the cluster's ssh config>`` so it can reach the simulated hosts (nothing else changes).

Reports medians and the 32/1 ratio of each (goal for ringtrain: at most 1.5, flat in host count).

    python -m ringtrain.bench.launcher.probe_scaling [--sizes 1,4,16,32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ringtrain import sim
from ringtrain.bench.monitor import own_seconds
from ringtrain.hostfile import Host, Inventory
from ringtrain.probe.hostprobe import probe
from ringtrain.remote.ssh import SshRemote


def _ssh_wrapper(directory: Path, ssh_config: Path) -> Path:
    wrapper = directory / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{ssh_config}" "$@"\n')
    wrapper.chmod(0o755)
    return directory


def _median_time(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Median and best wall time, and the median CPU time of this (the launcher's) process
    including its threads; children (horovod's ssh processes) are added for the other side."""
    times, cpus = [], []
    for _ in range(repeats):
        cpu0 = own_seconds()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
        cpus.append(own_seconds() - cpu0)
    return statistics.median(times), min(times), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,4,16,32")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    from horovod.runner.launch import _check_all_hosts_ssh_successful

    with tempfile.TemporaryDirectory(prefix="rt-probe-bench-") as tmp:
        small = sim.SimConfig(name="pbench4", hosts=4, state_dir=Path(tmp) / "sim4")
        started = time.perf_counter()
        four = sim.up(small)
        print(f"sim: 4 hosts up in {time.perf_counter() - started:.2f} s (goal <= 5 s)", flush=True)
        sim.down(four.config, purge=True)
        cfg = sim.SimConfig(name="pbench", hosts=max(sizes), state_dir=Path(tmp) / "sim")
        started = time.perf_counter()
        cluster = sim.up(cfg)
        print(f"sim: {max(sizes)} hosts up in {time.perf_counter() - started:.2f} s", flush=True)
        try:
            bindir = _ssh_wrapper(Path(tmp), cluster.ssh_config)
            os.environ["PATH"] = f"{bindir}:{os.environ['PATH']}"
            remote = SshRemote(cluster.ssh_config, cluster.known_hosts)
            rows = []
            for n in sizes:
                names = cluster.names[:n]
                inventory = Inventory(tuple(Host(h, 4) for h in names), source=f"sim {n}")

                def ours(inventory: Inventory = inventory) -> None:
                    report = probe(inventory, remote)
                    bad = [r.host for r in report.results if not r.reachable]
                    if bad:
                        sys.exit(f"probe failed on {bad}")

                def theirs(names: tuple[str, ...] = names) -> None:
                    # fn_cache=None: no result cache, as horovodrun --disable-cache
                    if not _check_all_hosts_ssh_successful(list(names), fn_cache=None):
                        sys.exit("horovodrun's ssh check failed")

                rt = _median_time(ours, args.repeats)
                hv = _median_time(theirs, args.repeats)
                rows.append((n, rt, hv))
                print(
                    f"{n:3d} hosts: ringtrain probe median {rt[0]:.3f} s (best {rt[1]:.3f}, "
                    f"launcher CPU {rt[2]:.3f} s); horovodrun ssh check median {hv[0]:.3f} s "
                    f"(best {hv[1]:.3f}, launcher CPU {hv[2]:.3f} s)",
                    flush=True,
                )
        finally:
            sim.down(cluster.config, purge=True)
    first, last = rows[0], rows[-1]
    print(
        f"\n{last[0]}/{first[0]} host ratio: ringtrain probe {last[1][0] / first[1][0]:.2f} "
        f"(goal <= 1.5), horovodrun ssh check {last[2][0] / first[2][0]:.2f}"
    )
    print(
        f"at {last[0]} hosts ringtrain's probe (GPUs, versions, interfaces) takes "
        f"{last[1][0] / last[2][0]:.2f}x the time of horovodrun's reachability-only check"
    )
    print(
        f"launcher CPU per host at {last[0]} hosts: "
        f"ringtrain {last[1][2] / last[0] * 1000:.1f} ms, "
        f"horovodrun {last[2][2] / last[0] * 1000:.1f} ms. All simulated hosts share this "
        f"machine's {os.cpu_count()} cores, so their sshd and probe work serializes here; on real "
        "hosts it runs in parallel, one host's CPU each."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
