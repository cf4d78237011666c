"""Benchmark: inventory parse + allocation + plan at 10 to 10,000 hosts (issue 14's last goal:
<= 1 s at 10,000 hosts, 8 slots each). Pure work, no host is contacted: an Open MPI hostfile
and a YAML inventory with labels are generated, parsed by the real readers, allocated with ring
ordering by a label, and planned (argv, hostfile text) for every slot.

    python -m ringtrain.bench.plan_scale [--sizes 10,100,1000,10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ringtrain.hostfile import AllocationPolicy, allocate, parse_inventory_text
from ringtrain.launch.plan import PlanInputs, make_plan
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,100,1000,10000")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    inputs = PlanInputs(run_id="bench", environ={"PATH": "/usr/bin"}, is_root=False,
                        python="/usr/bin/python3")
    print(f"{'hosts':>6} {'ranks':>6} {'format':>7} {'parse':>8} {'allocate':>9} {'plan':>8} "
          f"{'total':>8}")
    worst = 0.0
    for n in (int(s) for s in args.sizes.split(",")):
        for fmt, text, label in (("openmpi", _openmpi(n), None), ("yaml", _yaml(n), "rack")):
            inventory = parse_inventory_text(text, fmt, f"bench-{n}")
            policy = AllocationPolicy(ring_label=label)
            alloc = allocate(inventory, None, policy=policy)
            spec = LaunchSpec(script="train.py", working_dir=Path("/w"), runs_dir=Path("/w/r"),
                              allocation=policy)
            t_parse = _time(lambda t=text, f=fmt: parse_inventory_text(t, f, "bench"),
                            args.repeats)
            t_alloc = _time(lambda i=inventory, pol=policy: allocate(i, None, policy=pol),
                            args.repeats)
            t_plan = _time(lambda s=spec, a=alloc: make_plan(s, a, inputs), args.repeats)
            total = t_parse + t_alloc + t_plan
            worst = max(worst, total) if n >= 10000 else worst
            print(f"{n:>6} {alloc.np:>6} {fmt:>7} {t_parse * 1e3:>6.1f}ms {t_alloc * 1e3:>7.1f}ms "
                  f"{t_plan * 1e3:>6.1f}ms {total * 1e3:>6.1f}ms", flush=True)
    if worst:
        print(f"\nat 10,000 hosts: {worst:.2f} s (goal <= 1 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
