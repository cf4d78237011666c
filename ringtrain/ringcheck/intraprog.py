"""GPU-to-GPU inside one host, for the ring check: ``python -m ringtrain.ringcheck.intraprog``
runs on every host (through the Remote seam, like the reaper, isolated: ``-I``) and prints one
JSON line.

The measurement is NCCL's own, by nccl-tests' ``all_reduce_perf`` over every GPU of the host
(``-g N``, one process): its bus bandwidth is what a ring over those GPUs gets (NVLink or PCIe,
whichever NCCL picks). ringtrain ships no CUDA code; where the tool is not on PATH, or the host
has fewer than two GPUs, the line says so and nothing is measured. ``parse_nccl_tests`` is
pure: nccl-tests prints one row per size (out-of-place then in-place: time, algbw, busbw,
#wrong), then ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : X`` (GB/s).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from typing import Any

TOOL = "all_reduce_perf"
SIZES = ("-b", "32M", "-e", "256M", "-f", "2")
_ROW_RE = re.compile(r"^(?:\s*\d+:)?\s+(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+(.*)$")
_AVG_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_BOUNDS_RE = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """``all_reduce_perf``'s output -> avg_busbw_GBps, peak_busbw_GBps (the largest size,
    out-of-place), rows, wrong (any #wrong or out-of-bounds value). Raises ValueError when
    there is no average line (the tool failed or was cut short)."""
    rows = []
    wrong = False
    for line in text.splitlines():
        m = _ROW_RE.match(line)
        if not m:
            continue
        fields = m.group(3).split()
        if len(fields) < 4:
            continue
        try:
            busbw = float(fields[2])
        except ValueError:
            continue
        errors = [f for i, f in enumerate(fields) if i % 4 == 3]
        wrong = wrong or any(e not in ("0", "N/A") for e in errors)
        rows.append({"bytes": int(m.group(1)), "busbw_GBps": busbw})
    avg = _AVG_RE.search(text)
    if avg is None:
        raise ValueError("no '# Avg bus bandwidth' line")
    bounds = _BOUNDS_RE.search(text)
    wrong = wrong or (bounds is not None and bounds.group(1) != "0")
    peak = max(rows, key=lambda r: r["bytes"])["busbw_GBps"] if rows else None
    return {"avg_busbw_GBps": float(avg.group(1)), "peak_busbw_GBps": peak, "rows": rows,
            "wrong": wrong}


def measure(timeout_s: float = 120.0) -> dict[str, Any]:
    from ringtrain.launch.job.run import count_local_gpus  # noqa: PLC0415 - only when run

    gpus = count_local_gpus()
    if gpus < 2:
        return {"status": "one-gpu" if gpus == 1 else "no-gpu", "gpus": gpus}
    tool = shutil.which(TOOL)
    if tool is None:
        return {"status": "no-tool", "gpus": gpus,
                "note": f"{TOOL} (nccl-tests) is not on PATH"}
    try:
        done = subprocess.run([tool, *SIZES, "-g", str(gpus)], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "gpus": gpus, "note": f"{TOOL} ran over {timeout_s:.0f} s"}
    try:
        result = parse_nccl_tests(done.stdout)
    except ValueError as err:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"status": "failed", "gpus": gpus,
                "note": f"{TOOL} exited {done.returncode}: {err}; {' | '.join(tail)}"}
    return {"status": "ok", "gpus": gpus, **result}


def main() -> None:
    print("RINGCHECK-INTRA " + json.dumps(measure()), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
