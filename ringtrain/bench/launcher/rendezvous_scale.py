"""Benchmark: ``--elastic``'s launcher side at 64 to 4,096 simulated workers (issue 41 item 3).

What runs is Horovod 0.28.1's own elastic driver as ``ringtrain.hvd_driver`` runs it (its rule
patched in): ``ElasticDriver`` with ringtrain's discovery script (``launchers.discovery_script``,
8 slots per host) and the ``RendezvousServer`` with ``create_rendezvous_handler``'s handler, in
this process, so this process's CPU is the launcher's. The workers are simulated: the driver's
``create_worker_fn`` is a stand-in that blocks until the benchmark ends that worker (no ssh,
no process), and the workers' requests come from one asyncio process
(``rendezvous_clients``) speaking the workers' protocol. Per size:

- discovery: one run of the discovery script as the driver runs it every second
  (``HostDiscoveryScript``, through ``safe_shell_exec``): wall time and CPU;
- a loss: one worker exits 1; the others re-init (GET ``rank_and_size``, held until every
  worker of the round is recorded); ringtrain's rule keeps the host and the driver starts a
  new worker in the slot; then the three Gloo contexts (``--mode``);
- a join: one 8-slot host is added to the discovery script's file; the time until the driver
  sees it, then every worker re-inits and the world grows by 8, then the Gloo contexts.

For each round: time until every ``rank_and_size`` was answered, time until the last worker
left its Gloo contexts, requests served per second, and the launcher's CPU in the round.
``--mode full`` runs Gloo's whole full mesh (requests quadratic, bytes cubic in the size);
``sample:K`` reads K peers' addresses per context (the linear part exactly), and the table
adds what the full mesh would ask of the server (``gloo_mesh_cost``).

    python -m ringtrain.bench.launcher.rendezvous_scale --workers 64,512,4096
"""

from __future__ import annotations

import argparse
import json
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ringtrain import hvd_driver
from ringtrain.bench.launcher.rendezvous_clients import gloo_mesh_cost
from ringtrain.launch.plan.launchers import discovery_script

SLOTS = 8
FULL_MAX = 256  # --mode full beyond this is hours of the server's CPU (gloo_mesh_cost)


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def netstat_field(text: str, name: str) -> int:
    """A TcpExt counter from /proc/net/netstat's text (a line of names, a line of values).
    Pure."""
    lines = [line.split() for line in text.splitlines() if line.startswith("TcpExt:")]
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if name in names:
            return int(values[names.index(name)])
    raise KeyError(f"/proc/net/netstat has no TcpExt {name}")


def listen_overflows() -> int:
    """Connections the kernel dropped because a listen queue was full (machine-wide)."""
    return netstat_field(Path("/proc/net/netstat").read_text(), "ListenOverflows")


class Workers:
    """The driver's ``create_worker_fn``: a worker 'runs' until ``end`` gives its exit code."""

    def __init__(self) -> None:
        self.exits: dict[tuple[str, int], list[Any]] = {}
        self.started: queue.Queue[tuple[str, int]] = queue.Queue()

    def create(self, slot_info: Any, events: list[threading.Event]) -> tuple[int, float]:
        key = (slot_info.hostname, slot_info.local_rank)
        self.exits[key] = entry = [threading.Event(), 0]
        self.started.put(key)
        entry[0].wait()
        return entry[1], time.time()

    def end(self, key: tuple[str, int], code: int) -> None:
        entry = self.exits[key]
        entry[1] = code
        entry[0].set()

    def drain(self, count: int, timeout: float = 60.0) -> list[tuple[str, int]]:
        return [self.started.get(timeout=timeout) for _ in range(count)]


class Clients:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ringtrain.bench.launcher.rendezvous_clients"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        out: dict[str, Any] = json.loads(self.proc.stdout.readline())
        if "error" in out:
            raise RuntimeError(f"simulated workers: {out['error']}")
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def world(driver: Any) -> list[list[Any]]:
    return [[s.hostname, s.local_rank, s.rank, s.size, s.local_rank, s.local_size,
             s.cross_rank, s.cross_size]
            for slots in driver.host_assignments.values() for s in slots]


def round_(driver: Any, sim: Workers, clients: Clients, port: int, reinit: list[Any],
           new: int, sample: int | None, t0: float, cpu0: float) -> dict[str, Any]:
    """The re-inits (sent already or now), the ``new`` workers the driver starts, the Gloo
    contexts of the new world; times from ``t0``, launcher CPU from ``cpu0``."""
    ov0 = listen_overflows()
    clients.send({"op": "reinit", "port": port, "slots": reinit})
    ranks = clients.answer()
    t_ranks = time.perf_counter() - t0
    started = sim.drain(new)
    members = world(driver)
    t_gloo = time.perf_counter()
    clients.send({"op": "gloo", "port": port, "workers": members, "sample": sample})
    gloo = clients.answer()
    t_end = time.perf_counter()
    cpu = cpu_self() - cpu0
    overflows = listen_overflows() - ov0
    return {"size": len(members), "rank_and_size_s": t_ranks, "started": started,
            "gloo_s": t_end - t_gloo, "total_s": t_end - t0, "launcher_cpu_s": cpu,
            "requests": ranks["requests"] + gloo["requests"],
            "failed": ranks["failed"] + gloo["failed"], "listen_overflows": overflows,
            "req_per_s": gloo["requests"] / (t_end - t_gloo),
            "cpu_ms_per_req": 1000 * cpu / (ranks["requests"] + gloo["requests"])}


def measure(n: int, sample: int | None, work: Path) -> dict[str, Any]:
    from horovod.runner.elastic.discovery import HostDiscoveryScript
    from horovod.runner.elastic.driver import ElasticDriver
    from horovod.runner.elastic.rendezvous import create_rendezvous_handler
    from horovod.runner.http.http_server import RendezvousServer

    hosts = n // SLOTS
    hosts_file = work / f"hosts-{n}"
    hosts_file.write_text("".join(f"h{i:05d}:{SLOTS}\n" for i in range(hosts)))
    script = work / f"discover-{n}"
    script.write_text(discovery_script(hosts_file))
    script.chmod(0o700)
    discovery = HostDiscoveryScript(str(script), SLOTS)
    w0, c0, k0 = time.perf_counter(), cpu_self(), cpu_children()
    for _ in range(5):
        assert len(discovery.find_available_hosts_and_slots()) == hosts
    out: dict[str, Any] = {"workers": n, "discovery_s": (time.perf_counter() - w0) / 5,
                           "discovery_cpu_s": (cpu_self() - c0 + cpu_children() - k0) / 5}

    rendezvous = RendezvousServer()
    driver = ElasticDriver(rendezvous, discovery, min_num_proc=n // 2, max_num_proc=n + SLOTS,
                           timeout=600)
    port = rendezvous.start(create_rendezvous_handler(driver))
    sim, clients = Workers(), Clients()
    try:
        driver.wait_for_available_slots(n)
        driver.start(n, sim.create)
        slots = sim.drain(n)
        # a loss: one worker exits 1, the others re-init; ringtrain's rule refills its slot
        victim = ("h00001" if hosts > 1 else "h00000", 3)
        t0, cpu0 = time.perf_counter(), cpu_self()
        sim.end(victim, 1)
        out["loss"] = round_(driver, sim, clients, port, [list(k) for k in slots if k != victim],
                             1, sample, t0, cpu0)
        # a join: one more host in the discovery script's file
        t0, cpu0 = time.perf_counter(), cpu_self()
        with hosts_file.open("a") as f:
            f.write(f"h{hosts:05d}:{SLOTS}\n")
        while f"h{hosts:05d}" not in driver._host_manager.current_hosts.host_slots:
            time.sleep(0.01)
        discovered = time.perf_counter() - t0
        t0, cpu0 = time.perf_counter(), cpu_self()  # the workers re-init once they know
        out["join"] = round_(driver, sim, clients, port, [list(k) for k in slots], SLOTS,
                             sample, t0, cpu0)
        out["join"]["discovered_s"] = discovered
    finally:
        clients.close()
        driver.stop()
        for key in list(sim.exits):
            sim.end(key, 0)
    requests, moved = gloo_mesh_cost(n)
    out["full_mesh_requests"], out["full_mesh_bytes"] = requests, moved
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="64,512,4096")
    p.add_argument("--mode", default="sample:1", help="full, or sample:K (K peers read)")
    p.add_argument("--server", choices=("ringtrain", "horovod", "backlog"),
                   default="ringtrain", help="the rendezvous server as ringtrain.hvd_driver "
                   "runs it (tune_rendezvous), as Horovod ships it, or with the backlog only")
    p.add_argument("--json", type=Path, help="write the results here")
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.workers.split(",")]
    if a.mode == "full":
        sample = None
        if max(sizes) > FULL_MAX:
            p.error(f"--mode full above {FULL_MAX} workers: Gloo's full mesh of {max(sizes)} "
                    f"is {gloo_mesh_cost(max(sizes))[0]:,} requests; use --mode sample:K")
    elif a.mode.startswith("sample:") and a.mode[7:].isdigit() and int(a.mode[7:]) > 0:
        sample = int(a.mode[7:])
    else:
        p.error(f"--mode {a.mode}: full, or sample:K with K >= 1 (e.g. sample:1)")
    hvd_driver.patch()  # the driver ringtrain runs: Horovod's, its rule changed
    if a.server == "ringtrain":
        hvd_driver.tune_rendezvous()
    elif a.server == "backlog":  # one of ringtrain's two settings, to tell them apart
        from horovod.runner.http import http_server
        http_server.RendezvousHTTPServer.request_queue_size = hvd_driver.RENDEZVOUS_BACKLOG
    results = []
    print(f"{'workers':>7} {'round':>5} {'rank_and_size':>13} {'gloo':>8} {'total':>8} "
          f"{'req/s':>7} {'launcher CPU':>12} {'ms/req':>7} {'failed':>6} "
          f"{'overflows':>9} {'full-mesh req':>13} {'full-mesh GB':>12}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rdv-scale-") as tmp:
        for n in sizes:
            r = measure(n, sample, Path(tmp))
            results.append(r)
            for name in ("loss", "join"):
                x = r[name]
                print(f"{n:>7} {name:>5} {x['rank_and_size_s']:>12.2f}s {x['gloo_s']:>7.2f}s "
                      f"{x['total_s']:>7.2f}s {x['req_per_s']:>7.0f} "
                      f"{x['launcher_cpu_s']:>11.2f}s {x['cpu_ms_per_req']:>7.3f} "
                      f"{x['failed']:>6} {x['listen_overflows']:>9} {r['full_mesh_requests']:>13,} "
                      f"{r['full_mesh_bytes'] / 1e9:>12.2f}", flush=True)
            print(f"{n:>7} discovery {r['discovery_s'] * 1000:.1f} ms, "
                  f"{r['discovery_cpu_s'] * 1000:.1f} ms CPU per run; a join seen after "
                  f"{r['join']['discovered_s']:.2f} s", flush=True)
    if a.json:
        a.json.write_text(json.dumps({"mode": a.mode, "server": a.server, "results": results},
                                     indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
