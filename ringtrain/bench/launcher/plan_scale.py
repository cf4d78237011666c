"""Benchmark: inventory parse + allocation + plan at 10 to 10,000 hosts (issue 14's last goal:
<= 1 s at 10,000 hosts, 8 slots each). Pure work, no host is contacted: an Open MPI hostfile
and a YAML inventory with labels are generated, parsed by the real readers, allocated with ring
ordering by a label, and planned (argv, hostfile text) for every slot.

    python -m ringtrain.bench.launcher.plan_scale [--sizes 10,100,1000,10000] [--repeats 3]

Then the whole command, end to end: ``ringtrain launch --dry-run --no-probe`` on an inventory
of names that do not resolve (``.invalid``, RFC 6761), as real sites have slow or partial DNS
(issue 23's goal: <= 2 s at 10,000 hosts; 500 such hosts took 121 s before names were
resolved once, in parallel, under one budget).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ringtrain.hostfile import AllocationPolicy, allocate, parse_inventory_text
from ringtrain.launch.plan.make import PlanInputs, make_plan
from ringtrain.launch.plan.sessionenv import SessionEnv
from ringtrain.spec import LaunchSpec


def _openmpi(n: int) -> str:
    return "".join(f"node{i:05d}.cluster slots=8\n" for i in range(n))


def _yaml(n: int) -> str:
    lines = ["hosts:"]
    lines += [f"  - {{name: node{i:05d}, slots: 8, labels: {{rack: r{i // 32:03d}}}}}"
              for i in range(n)]
    return "\n".join(lines) + "\n"


def _time(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


INPUTS = PlanInputs(SessionEnv("bench", {"PATH": "/usr/bin"}, False, "/usr/bin/python3"))


def plan_times(n: int, fmt: str, repeats: int = 3) -> dict[str, float]:
    """Median seconds to parse, allocate and plan ``n`` hosts of 8 slots from ``fmt``
    (``openmpi``, or ``yaml`` with a rack label that orders the ring)."""
    text, label = (_openmpi(n), None) if fmt == "openmpi" else (_yaml(n), "rack")
    inventory = parse_inventory_text(text, fmt, f"bench-{n}")
    policy = AllocationPolicy(ring_label=label)
    alloc = allocate(inventory, None, policy=policy)
    spec = LaunchSpec(script="train.py", working_dir=Path("/w"), runs_dir=Path("/w/r"),
                      allocation=policy)
    t_parse = _time(lambda: parse_inventory_text(text, fmt, "bench"), repeats)
    t_alloc = _time(lambda: allocate(inventory, None, policy=policy), repeats)
    t_plan = _time(lambda: make_plan(spec, alloc, INPUTS), repeats)
    return {"ranks": alloc.np, "parse_s": t_parse, "allocate_s": t_alloc, "plan_s": t_plan,
            "total_s": t_parse + t_alloc + t_plan}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,100,1000,10000")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print(f"{'hosts':>6} {'ranks':>6} {'format':>7} {'parse':>8} {'allocate':>9} {'plan':>8} "
          f"{'total':>8}")
    worst = 0.0
    for n in (int(s) for s in args.sizes.split(",")):
        for fmt in ("openmpi", "yaml"):
            t = plan_times(n, fmt, args.repeats)
            worst = max(worst, t["total_s"]) if n >= 10000 else worst
            print(f"{n:>6} {t['ranks']:>6} {fmt:>7} {t['parse_s'] * 1e3:>6.1f}ms "
                  f"{t['allocate_s'] * 1e3:>7.1f}ms {t['plan_s'] * 1e3:>6.1f}ms "
                  f"{t['total_s'] * 1e3:>6.1f}ms", flush=True)
    if worst:
        print(f"\nat 10,000 hosts: {worst:.2f} s (goal <= 1 s)")
    print(f"\n{'hosts':>6}  ringtrain launch --dry-run --no-probe, names that do not resolve")
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"{n:>6}  {dry_run_s(n):.2f} s" + ("  (goal <= 2 s)" if n >= 10000 else ""),
              flush=True)
    return 0


def dry_run_s(n: int) -> float:
    """Wall seconds of the real command on ``n`` hosts named ``nodeNNNNN.invalid``."""
    with tempfile.TemporaryDirectory(prefix="rt-plan-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text("print('hi')\n")
        (folder / "hosts.txt").write_text(
            "".join(f"node{i:05d}.invalid slots=8\n" for i in range(n)))
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ringtrain", "launch", "--dry-run", "--no-probe",
                        "--hosts", "hosts.txt", "--runs-dir", "runs", "train.py"],
                       cwd=folder, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - started


if __name__ == "__main__":
    raise SystemExit(main())
