"""Benchmark: the launcher's own costs from 1 to 1,000 hosts (8 ranks each), by simulation
(issue 14). One command, a table, ``scale.json`` and ``scale.png``:

    python -m ringtrain.bench.launcher.scale [--hosts 1,10,100,1000] [--out DIR]

Per host count N:

* probe: ringtrain's real SSH fan-out (``SshRemote``: strict host keys, ssh_config, 64 at a
  time) and the real probe parser against N SSH hosts served by one process
  (``ringtrain.sim.sshfarm``, its own host key per address): wall time, this process's CPU per
  host, and the farm's CPU apart (it plays N sshds and shells);
* the doctor (issue 25): every farm host answers with the doctor's sections of an 8 x H100 host
  (every 10th sick); the verdict's CPU with and without the doctor, and the parser's with and
  without those sections, side by side on the same hosts, and the sick hosts it names;
* teardown fan-out: the reaper command on every host through the same path;
* supervision with 8N simulated ranks over real sockets (``control_scale.run_size``): the
  control server's CPU, one supervision tick, the time to name one silent rank and one lost
  host (heartbeat timeout 5 s); from ``HUBS_FROM`` ranks through a hub a host, as the
  launcher supervises by default (``--control-hubs auto``; simulated hubs, ``simhubs.py``);
* parse + allocate + plan of 10N hosts (``plan_scale.plan_times``: an Open MPI hostfile, and
  YAML with a rack label);
* the anchor, where Horovod is installed: horovodrun's own SSH check
  (``horovod.runner.launch._check_all_hosts_ssh_successful``, one OpenSSH ``ssh HOST true`` per
  host, up to 1,000 at a time) over the same farm, its wall time and CPU (its ssh processes
  included). ``ssh`` there is a wrapper that adds the farm's ssh_config and known_hosts, so the
  check finds the hosts and writes nothing to the user's ~/.ssh.

The goals (issue 14, at 1,000 hosts / 8,000 ranks on this 2-core machine): probe <= 30 s and
<= 10 ms launcher CPU per host; a tick <= 50 ms; silent rank / lost host named within the
8-rank bound + 1 s; teardown fan-out <= 30 s; plan of 10,000 hosts <= 1 s. At 10,000 hosts /
80,000 ranks (issue 41): probe and teardown <= 60 s, <= 10 ms per host; supervision <= 1 core.

Where this machine cannot hold a size, the row says so instead of failing: one connection a
rank is measured at the most ranks this process may hold a connection for (one descriptor
each: ``supervised_ranks``), with that CPU and tick scaled linearly to the asked size; the
anchor runs up to ``--anchor-max`` hosts (it already failed at 1,000).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from ringtrain.bench import figures
from ringtrain.bench.launcher import control_scale, plan_scale
from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.plan.make import HUBS_FROM, hubs_for
from ringtrain.launch.supervise.teardown import reaper_argv
from ringtrain.probe.hostprobe import GpuStatus, probe
from ringtrain.probe.probe_parse import ProbeReport, parse_probe_output
from ringtrain.probe.verdict import PreflightPolicy, evaluate
from ringtrain.remote.ssh import SshRemote
from ringtrain.sim import sshfarm

FAIL_EVERY = 97  # every 97th simulated host reports a lost GPU: the parser's failure path too


def _cpu_self() -> float:
    """This process's CPU and its finished children's: the probe's ``ssh -G`` per host counts
    (the farm, a child too, is reaped only after the measurements)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _farm_cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def ssh_phase(n: int, workdir: Path, anchor: bool = True) -> dict[str, Any]:
    """Probe and teardown fan-out over N simulated SSH hosts."""
    farm_dir = workdir / f"farm-{n}"
    farm = subprocess.Popen(
        [sys.executable, "-m", "ringtrain.sim.sshfarm", "--hosts", str(n), "--dir",
         str(farm_dir), "--fail-every", str(FAIL_EVERY)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert farm.stdout is not None
        ready = farm.stdout.readline()
        if not ready.startswith("READY"):
            raise SystemExit(f"the SSH farm did not start: {ready!r}")
        watched = psutil.Process(farm.pid)
        inventory = Inventory(tuple(Host(sshfarm.name(i), 8) for i in range(n)))
        remote = SshRemote(farm_dir / "ssh_config", farm_dir / "known_hosts",
                           connect_timeout=30.0)
        farm0, cpu0, wall0 = _farm_cpu(watched), _cpu_self(), time.perf_counter()
        report = probe(inventory, remote, python=sys.executable, timeout=120)
        probe_s, probe_cpu = time.perf_counter() - wall0, _cpu_self() - cpu0
        probe_farm = _farm_cpu(watched) - farm0
        doctor = doctor_costs(inventory, report)
        unreachable = [r.host for r in report.results if not r.reachable]
        lost = sum(r.gpu.status is GpuStatus.FAILED for r in report.results)
        # a host the probe could not reach is a result, as the launcher reports it (at 10,000
        # the farm, one process playing every sshd on the shared cores, dropped one in two runs)
        why = report.result(unreachable[0]).error if unreachable else ""
        argv = reaper_argv(sys.executable, "bench-scale", {})
        farm0, cpu0, wall0 = _farm_cpu(watched), _cpu_self(), time.perf_counter()
        answers = remote.run_each([(h, argv) for h in inventory.hosts], 60)
        reap_s, reap_cpu = time.perf_counter() - wall0, _cpu_self() - cpu0
        reap_farm = _farm_cpu(watched) - farm0
        clean = sum(1 for a in answers.values() if a.exit_code == 0 and '"left": []' in a.stdout)
        checked = horovod_ssh_check(n, farm_dir) if anchor else {}
    finally:
        farm.terminate()
        farm.wait(timeout=30)
    return {"probe_s": probe_s, "probe_cpu_ms_per_host": probe_cpu / n * 1e3,
            "probe_farm_cpu_s": probe_farm, "lost_gpu_hosts": lost,
            "expected_lost_gpu_hosts": n // FAIL_EVERY,
            "teardown_s": reap_s, "teardown_cpu_ms_per_host": reap_cpu / n * 1e3,
            "teardown_farm_cpu_s": reap_farm, "teardown_clean": clean,
            "probe_unreachable": len(unreachable), "probe_unreachable_why": why,
            **doctor, **checked}


def doctor_costs(inventory: Inventory, report: ProbeReport) -> dict[str, Any]:
    """The doctor's share of the launcher's CPU, side by side on the same hosts: the verdict
    with and without it, and the parse of the probe output with and without its sections."""
    n = len(inventory.hosts)
    out: dict[str, Any] = {}
    for doctor in (False, True):
        cpu0 = _cpu_self()
        verdict = evaluate(inventory, report, PreflightPolicy(doctor=doctor))
        out[f"verdict_cpu_ms_per_host_{'with' if doctor else 'without'}_doctor"] = (
            (_cpu_self() - cpu0) / n * 1e3)
    out["doctor_sick_hosts"] = sum({"xid-fatal", "pcie-width"} <= {j.finding.code
                                                                  for j in h.findings}
                                   for h in verdict.hosts)
    out["doctor_expected_sick_hosts"] = sum(i % sshfarm.SICK_EVERY == sshfarm.SICK_EVERY - 1
                                            for i in range(n))
    texts = [sshfarm.probe_output(i, FAIL_EVERY) for i in range(min(n, 1000))]
    for label, strip in (("with", False), ("without", True)):
        cpu0 = _cpu_self()
        for i, text in enumerate(texts):
            parse_probe_output(sshfarm.name(i), text.replace(sshfarm.doctor_sections(i), "")
                               if strip else text)
        out[f"parse_cpu_ms_per_host_{label}_doctor"] = (_cpu_self() - cpu0) / len(texts) * 1e3
    return out


# Runs horovodrun's own check; prints its wall time and CPU (with its ssh processes) as JSON.
_HOROVOD_CHECK = """
import json, resource, sys, time
from horovod.runner.launch import _check_all_hosts_ssh_successful as check
def cpu():
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))
cpu0, wall0 = cpu(), time.perf_counter()
ok = check(sys.argv[1:], fn_cache=None)
print(json.dumps({"ok": bool(ok), "wall_s": time.perf_counter() - wall0, "cpu_s": cpu() - cpu0}))
"""


def horovod_ssh_check(n: int, farm_dir: Path) -> dict[str, Any]:
    """horovodrun's SSH check over the farm; {} where Horovod or OpenSSH's ssh is missing."""
    ssh = shutil.which("ssh")
    if ssh is None or importlib.util.find_spec("horovod") is None:
        return {}
    bin_dir = farm_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f"#!/bin/sh\nexec {ssh} -F {farm_dir / 'ssh_config'} "
                       f"-o UserKnownHostsFile={farm_dir / 'known_hosts'} -o LogLevel=ERROR "
                       '"$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([sys.executable, "-c", _HOROVOD_CHECK, *(sshfarm.name(i)
                           for i in range(n))], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    try:
        got = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"horovod_check_error": (done.stderr or done.stdout)[-500:]}
    lines = done.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("ssh not successful")]
    why = lines[failed[0] + 1].strip() if failed and failed[0] + 1 < len(lines) else ""
    return {"horovod_check_s": got["wall_s"], "horovod_check_ok": got["ok"],
            "horovod_check_cpu_ms_per_host": got["cpu_s"] / n * 1e3,
            "horovod_check_failed_hosts": len(failed), "horovod_check_why": why}


def supervised_ranks(wanted: int, limit: int) -> int:
    """The simulated ranks supervision is measured with: ``wanted``, or as many as a
    descriptor limit of ``limit`` leaves room for (one connection a rank, 256 spare), in
    whole thousands. Pure."""
    room = (limit - 256) // 1000 * 1000
    return wanted if wanted + 256 <= limit else max(room, 0)


def run(sizes: list[int], out: Path, anchor_max: int = 1000) -> list[dict[str, Any]]:
    rows = []
    header = (f"{'hosts':>5} {'probe':>7} {'cpu/host':>9} {'farm cpu':>9} {'teardown':>9} "
              f"{'ranks':>6} {'ctl cpu':>8} {'tick':>8} {'silent':>7} {'lost':>6} "
              f"{'plan 10N (mpi/yaml)':>20} {'horovodrun check':>17}")
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="ringtrain-scale-") as tmp:
        for n in sizes:
            row: dict[str, Any] = {"hosts": n, "ranks": 8 * n}
            row.update(ssh_phase(n, Path(tmp), anchor=n <= anchor_max))
            # as the launcher supervises by default (--control-hubs auto): a hub a host from
            # HUBS_FROM ranks, one connection a host; below it one a rank
            hubs = hubs_for(None, 8 * n)
            ranks = 8 * n if hubs else supervised_ranks(
                8 * n, control_scale.raise_fd_limit(8 * n + 1024))
            if ranks == 0:
                raise SystemExit("this process may not open the descriptors supervision "
                                 "needs (ulimit -n: at least 1,256)")
            ctl = control_scale.run_size(ranks, workers=4, heartbeat_timeout=5.0, hubs=hubs)
            row.update({f"control_{k}": v for k, v in ctl.items()})
            row["control_ranks"], row["control_via"] = ranks, "hubs" if hubs else "ranks"
            if ranks < 8 * n:  # linear in the ranks: SCALE.md's 8,000-19,200 rows
                row["control_cpu_per_s_scaled"] = ctl["cpu_per_s"] * 8 * n / ranks
                row["control_tick_ms_scaled"] = ctl["tick_ms"] * 8 * n / ranks
            for fmt in ("openmpi", "yaml"):
                row[f"plan_{fmt}_s"] = plan_scale.plan_times(10 * n, fmt)["total_s"]
            rows.append(row)
            print(f"{n:>5} {row['probe_s']:>6.2f}s {row['probe_cpu_ms_per_host']:>7.1f}ms "
                  f"{row['probe_farm_cpu_s']:>8.2f}s {row['teardown_s']:>8.2f}s {8 * n:>6} "
                  f"{ctl['cpu_per_s'] * 100:>7.1f}% {ctl['tick_ms']:>6.2f}ms "
                  f"{_secs(ctl['detect_s']):>7} {_secs(ctl['host_detect_s']):>6} "
                  f"{row['plan_openmpi_s']:>9.3f}s/{row['plan_yaml_s']:.3f}s "
                  f"{_anchor_cell(row):>17}", flush=True)
            print(f"      doctor: verdict {row['verdict_cpu_ms_per_host_with_doctor']:.2f} ms/host "
                  f"with it, {row['verdict_cpu_ms_per_host_without_doctor']:.2f} without; parse "
                  f"{row['parse_cpu_ms_per_host_with_doctor']:.2f} ms/host with its sections, "
                  f"{row['parse_cpu_ms_per_host_without_doctor']:.2f} without; sick hosts found "
                  f"{row['doctor_sick_hosts']} of {row['doctor_expected_sick_hosts']}",
                  flush=True)
            if row["probe_unreachable"]:
                print(f"      the probe could not reach {row['probe_unreachable']} of {n:,} "
                      f"hosts: {row['probe_unreachable_why']}", flush=True)
            if row.get("horovod_check_failed_hosts"):
                print(f"      horovodrun's check failed on {row['horovod_check_failed_hosts']} "
                      f"hosts: {row['horovod_check_why']}", flush=True)
            if ranks < 8 * n:
                print(f"      supervision measured with {ranks:,} ranks, not {8 * n:,}: one "
                      "descriptor a rank, and this process may hold "
                      f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}; scaled linearly to "
                      f"{8 * n:,}: {row['control_cpu_per_s_scaled'] * 100:.0f}% of a core, a "
                      f"{row['control_tick_ms_scaled']:.0f} ms tick", flush=True)
            if hubs:
                print(f"      supervision through a hub a host (--control-hubs auto from "
                      f"{HUBS_FROM:,} ranks): {n:,} connections for {8 * n:,} ranks",
                      flush=True)
            if n > anchor_max:
                print(f"      horovodrun's check not run above {anchor_max:,} hosts "
                      "(--anchor-max)", flush=True)
            if ctl["false_fault"]:
                print(f"      FALSE FAULT: {ctl['false_fault']}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(rows, indent=2))
    picture = plot(out / "scale.png", rows)
    print(f"\nwritten: {out / 'scale.json'}" + (f", {picture}" if picture else ""))
    return rows


def _secs(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}s"  # NaN: nothing to detect (one host)


def _anchor_cell(row: dict[str, Any]) -> str:
    if "horovod_check_s" not in row:
        return "n/a" if "horovod_check_error" not in row else "error"
    cell = f"{row['horovod_check_s']:.2f}s {row['horovod_check_cpu_ms_per_host']:.0f}ms/h"
    return cell if row["horovod_check_ok"] else cell + " FAIL"


def plot(path: Path, rows: list[dict[str, Any]]) -> Path | None:
    try:
        plt = figures.pyplot()
    except ImportError:
        return None
    hosts = [r["hosts"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    left, right = axes
    for key, label in (("probe_s", "probe wall"), ("teardown_s", "teardown fan-out"),
                       ("plan_openmpi_s", "plan 10N hosts (Open MPI)"),
                       ("plan_yaml_s", "plan 10N hosts (YAML)"),
                       ("horovod_check_s", "horovodrun's SSH check")):
        if all(key in r for r in rows):
            left.plot(hosts, [r[key] for r in rows], marker="o", label=label)
    left.axhline(30, color="grey", linestyle=":", label="probe/teardown goal 30 s")
    left.set(xscale="log", yscale="log", xlabel="hosts", ylabel="seconds")
    for key, label, scale in (("probe_cpu_ms_per_host", "launcher CPU per host (ms)", 1),
                              ("horovod_check_cpu_ms_per_host",
                               "horovodrun check CPU per host (ms)", 1),
                              ("control_tick_ms", "supervision tick (ms)", 1),
                              ("control_cpu_per_s", "control server CPU (%)", 100)):
        if all(key in r for r in rows):
            right.plot(hosts, [r[key] * scale for r in rows], marker="o", label=label)
    right.set(xscale="log", yscale="log", xlabel="hosts (8 ranks each)")
    for ax in axes:
        figures.dress(ax)
    return figures.save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ringtrain.bench.launcher.scale",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="1,10,100,1000",
                   help="host counts, comma-separated, 8 ranks each (default: %(default)s)")
    p.add_argument("--anchor-max", type=int, default=1000,
                   help="run horovodrun's own SSH check up to this many hosts (default: "
                   "%(default)s)")
    p.add_argument("--out", type=Path, default=Path("runs") / time.strftime("scale-%Y%m%d-%H%M%S"),
                   help="where scale.json and scale.png go")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.hosts.split(",")]
    except ValueError:
        p.error(f"--hosts {args.hosts!r}: host counts, comma-separated: 1,10,100,1000")
    if min(sizes) < 1:
        p.error(f"--hosts {args.hosts!r}: each count at least 1")
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    control_scale.raise_fd_limit()
    run(sizes, args.out, args.anchor_max)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
