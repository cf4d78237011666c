"""Fault benchmark: how fast ringtrain detects each fault and has every host clean again.

On a simulated 3-host cluster (root needed) a 3-rank Horovod job runs an all-reduce loop; once it
is under way one fault is injected at T0:

  rank-kill      kill -9 of the rank on gpu03
  exception      the rank on gpu02 raises (it watches for a trigger file)
  host-loss      gpu02's link goes down (restored after the run)
  sshd-session   kill -9 of the sshd session that carries gpu03's Open MPI daemon
  sigint         Ctrl-C to ringtrain itself

``detected`` is when ringtrain saw the fault (result.json ``detected_at``), ``torn down`` when the
reaper had verified every host clean (``torn_down_at``), both from T0. Then the hosts are
inspected directly: any rank or orted left is reported. Goals: rank death to full teardown within
5 s; host loss detected and torn down within 20 s.

    python -m ringtrain.bench.launcher.faults [--repeats 2] [--heartbeat-timeout 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ringtrain import sim
from ringtrain.rank import procfs

LOOP = """\
import os, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
trigger = os.environ["BENCH_TRIGGER"]
step = 0
while True:
    hvd.allreduce(tf.constant([1.0]))
    step += 1
    if hvd.rank() == 0 and step == 20:
        print("running", flush=True)
    if hvd.rank() == 1 and os.path.exists(trigger):
        raise RuntimeError("injected failure")
    time.sleep(0.05)
"""
FAULTS = ("rank-kill", "exception", "host-loss", "sshd-session", "sigint")


def _procs(cluster: sim.SimCluster, host: str, needle: str) -> list[int]:
    return [pid for pid, cmd in sim.host_processes(cluster.config, host) if needle in cmd]


def _inject(
    fault: str, cluster: sim.SimCluster, proc: subprocess.Popen[str], trigger: Path
) -> None:
    _, second, third = cluster.names[:3]
    if fault == "rank-kill":
        # one scan: this runs inside the timed window
        (rank,) = [
            pid
            for pid, cmd in sim.host_processes(cluster.config, third)
            if "ringtrain.rank.entry" in cmd and "orted" not in cmd
        ]
        os.kill(rank, signal.SIGKILL)
    elif fault == "exception":
        trigger.touch()
    elif fault == "host-loss":
        sim.set_link(cluster.config, second, up=False)
    elif fault == "sshd-session":
        session = _procs(cluster, third, "orted")[0]
        while "sshd" not in procfs.comm(session):
            session = procfs.parent(session)
        os.kill(session, signal.SIGKILL)
    elif fault == "sigint":
        proc.send_signal(signal.SIGINT)


def run_one(fault: str, cluster: sim.SimCluster, work: Path, hb_timeout: float) -> dict[str, float]:
    work.mkdir(parents=True)
    script, trigger = work / "loop.py", work / "trigger"
    script.write_text(LOOP)
    argv = [
        sys.executable,
        "-m",
        "ringtrain",
        "launch",
        "--runs-dir",
        str(work / "runs"),
        "-H",
        ",".join(f"{h}:1" for h in cluster.names[:3]),
        "--ssh-config",
        str(cluster.ssh_config),
        "--known-hosts",
        str(cluster.known_hosts),
        "--heartbeat-timeout",
        str(hb_timeout),
        "--env",
        "BENCH_TRIGGER",
        str(script),
    ]
    env = dict(os.environ, BENCH_TRIGGER=str(trigger))
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("[0] running"):
                break
        else:
            sys.exit(f"{fault}: the job ended before training started:\n{''.join(seen[-30:])}")
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        t0 = time.time()
        _inject(fault, cluster, proc, trigger)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        sim.set_link(cluster.config, cluster.names[1], up=True)
    (run_dir,) = (work / "runs").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    # Hosts ringtrain could not reach clean up after themselves (dead-man switch): poll.
    deadline = time.monotonic() + 30
    while (left := _leftovers(cluster)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {
        "detected": result["detected_at"] - t0,
        "torn_down": result["torn_down_at"] - t0,
        "clean": time.time() - t0,
        "exit_code": result["exit_code"],
        "left": left,
    }


def _leftovers(cluster: sim.SimCluster) -> int:
    return sum(
        ("ringtrain.rank.entry" in cmd) + ("orted" in cmd)
        for h in cluster.names
        for _, cmd in sim.host_processes(cluster.config, h)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--heartbeat-timeout", type=float, default=10.0)
    p.add_argument("--faults", default=",".join(FAULTS))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rt-fault-bench-") as tmp:
        cluster = sim.up(sim.SimConfig(name="fbench", hosts=3, state_dir=Path(tmp) / "sim"))
        rows = []
        try:
            for fault in args.faults.split(","):
                runs = [
                    run_one(fault, cluster, Path(tmp) / f"{fault}-{i}", args.heartbeat_timeout)
                    for i in range(args.repeats)
                ]
                rows.append((fault, runs))
                det = statistics.median(r["detected"] for r in runs)
                down = statistics.median(r["torn_down"] for r in runs)
                clean = statistics.median(r["clean"] for r in runs)
                print(
                    f"{fault:13s} detected {det:6.2f} s  torn down {down:6.2f} s  "
                    f"every host clean {clean:6.2f} s  "
                    f"exit {runs[0]['exit_code']:3.0f}  left {sum(r['left'] for r in runs):.0f}  "
                    f"(median of {len(runs)})",
                    flush=True,
                )
        finally:
            sim.down(cluster.config, purge=True)
    print(
        f"\nheartbeat timeout {args.heartbeat_timeout:g} s; times from fault injection, "
        "3 ranks on 3 simulated hosts. 'torn down': ringtrain verified every host it can "
        "reach; 'every host clean': no rank or orted left anywhere, including a lost host "
        "(seen from inside the simulation), whose ranks end themselves."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
