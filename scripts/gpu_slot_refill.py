"""A rank's GPU slot filled again at once, on a real GPU (issue 38 item 4; a device check, not a
test: run it by hand on a GPU host).

Under ``--elastic`` on one server (``-H localhost:8``), ringtrain's driver (``hvd_driver``)
starts a new worker in a dead rank's slot in the same round, without waiting for its GPU. That
is safe only if the killed rank's GPU memory is free before the new worker asks for it. Here,
with small CUDA programs (PyTorch) standing in for the ranks, for each size of memory held:

- ``recheck``: the holder is killed (SIGKILL) and ringtrain's own re-check (the restart path's
  ``launch.recover.recheck``, real ``nvidia-smi``, ``LocalRemote``) asks until the GPU is free;
- ``cold``: the holder is killed and a new process started at that instant (as the driver
  starts a worker): when its CUDA is up, how long its first allocation of the same size waited
  and how many tries failed;
- ``warm``: a process whose CUDA context is already up (a warm process on the same GPU) asks
  for the same memory the instant of the kill: the worst case, how long it waits.

    python scripts/gpu_slot_refill.py --gib 16,64,120 --out DIR

Writes DIR/refill.json and DIR/nvidia-smi-*.txt, and prints one line per trial.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ringtrain.hostfile import Host  # the checkout's, by the path above
from ringtrain.launch.recover.recheck import recheck
from ringtrain.remote.base import LocalRemote

HOLD = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("READY", flush=True)
time.sleep(3600)
"""

ASK = """
import json, sys, time
born = time.time()
import torch
warm = sys.argv[2] == "warm"
torch.empty(1, device="cuda"); torch.cuda.synchronize()
cuda_up = time.time()
if warm:
    print("WARM", flush=True)
    sys.stdin.readline()
go, fails = time.time(), 0
while True:
    try:
        x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
        x.fill_(2); torch.cuda.synchronize()
        break
    except torch.cuda.OutOfMemoryError:
        fails += 1
        torch.cuda.empty_cache()
        time.sleep(0.005)
print("RESULT " + json.dumps({"born": born, "cuda_up": cuda_up, "go": go,
                              "got": time.time(), "fails": fails}), flush=True)
"""


def _start(code: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stdin=stdin, text=True, start_new_session=True)


def _wait_for(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(word):
        raise SystemExit(f"expected {word}, got {line!r} (exit {proc.poll()})")


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _result(proc: subprocess.Popen[str]) -> dict[str, float]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise SystemExit(f"no result (exit {proc.wait()})")


def trial(kind: str, gib: float) -> dict[str, object]:
    holder = _start(HOLD, str(gib))
    _wait_for(holder, "READY")
    asker = None
    if kind == "warm":
        asker = _start(ASK, str(gib), "warm", stdin=subprocess.PIPE)
        _wait_for(asker, "WARM")
    killed = time.time()
    os.killpg(holder.pid, signal.SIGKILL)
    out: dict[str, object] = {"kind": kind, "gib": gib}
    if kind == "warm" and asker is not None and asker.stdin is not None:
        asker.stdin.write("go\n")
        asker.stdin.flush()
    elif kind == "cold":
        asker = _start(ASK, str(gib), "cold")
    if kind == "recheck":
        notes: list[str] = []
        result = recheck(LocalRemote(), [Host("localhost", 1)], 15.0, notes.append)
        out.update(free_after_s=round(time.time() - killed, 3), waited=result.waited,
                   left_out=result.left_out, unknown=result.unknown, notes=notes)
    holder.wait()
    if asker is not None:
        r = _result(asker)
        out.update(started_after_s=round(r["born"] - killed, 3),
                   cuda_up_after_s=round(r["cuda_up"] - killed, 3),
                   asked_after_s=round(r["go"] - killed, 3),
                   got_after_s=round(r["got"] - killed, 3), failed_tries=r["fails"])
        _end(asker)
    return out


def smi(out: Path, name: str) -> None:
    text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=False).stdout
    (out / f"nvidia-smi-{name}.txt").write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", default="16,64,120")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("."))
    opts = p.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    smi(opts.out, "before")
    rows = []
    for gib in (float(g) for g in opts.gib.split(",")):
        for _ in range(opts.repeats):
            for kind in ("recheck", "cold", "warm"):
                row = trial(kind, gib)
                rows.append(row)
                print(json.dumps(row), flush=True)
    smi(opts.out, "after")
    (opts.out / "refill.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
