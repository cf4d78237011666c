"""Benchmark: `ringtrain launch` vs a hand-written `mpirun` of the same 2-rank job.

Runs are alternated (ringtrain, mpirun, ringtrain, ...) so machine noise hits both alike; the
report is the median wall time of each and their ratio (target: at most 1.10).

    python -m ringtrain.bench.launcher.launch_overhead [--repeats 5] [--epochs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ringtrain.rank import envvars

DIGITS = Path(__file__).resolve().parents[2] / "models" / "digits.py"


def ringtrain_argv(runs_dir: Path, epochs: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ringtrain",
        "launch",
        "--runs-dir",
        str(runs_dir),
        "-H",
        "localhost:2",
        str(DIGITS),
        "--epochs",
        str(epochs),
    ]


def mpirun_argv(epochs: int, run_dir: Path) -> list[str]:
    """The same job by hand. It gets its own fresh run dir, as ringtrain gives each run, so
    both do the same work (checkpoint commits, TensorBoard logs) and neither resumes."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [
        "mpirun", *root, "-np", "2", "-bind-to", "none", "-map-by", "slot",
        "-x", "PATH", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", f"{envvars.RUN_DIR}={run_dir}",
        sys.executable, "-m", "mpi4py", str(DIGITS), "--epochs", str(epochs),
    ]  # fmt: skip


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(
            f"benchmark run failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-2000:]}"
        )
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args(argv)
    env_note = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    with tempfile.TemporaryDirectory(prefix="rt-bench-") as tmp:
        cwd = Path(tmp)
        rt: list[float] = []
        mp: list[float] = []
        for i in range(args.repeats):
            rt.append(timed(ringtrain_argv(cwd / "runs", args.epochs), cwd))
            mp.append(timed(mpirun_argv(args.epochs, cwd / f"bare-{i}"), cwd))
            print(
                f"round {i + 1}/{args.repeats}: ringtrain {rt[-1]:6.2f} s   mpirun {mp[-1]:6.2f} s",
                flush=True,
            )
    med_rt, med_mp = statistics.median(rt), statistics.median(mp)
    print(
        f"\ndigits, 2 ranks on localhost, {args.epochs} epochs, {args.repeats} alternated rounds "
        f"(TF_CPP_MIN_LOG_LEVEL={env_note})"
    )
    print(f"median wall time: ringtrain launch {med_rt:.2f} s, bare mpirun {med_mp:.2f} s")
    print(f"ratio ringtrain/mpirun: {med_rt / med_mp:.3f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
