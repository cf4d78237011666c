"""Benchmark: the launcher's control server and supervision with 8 to 8,000 simulated ranks
(issue 14, items 2 and 3 in part).

Simulated ranks are real sockets speaking the real protocol (``ringtrain.rank.events``): worker
processes open one connection per rank, check in proving the job's token, heartbeat every
second and drain the launcher's beats, like ``ringtrain.rank.agent``. The control server is the
real one, in this process, so its CPU is this process's CPU (the workers' is not counted). Per
size it prints the time until every rank checked in, this process's CPU per second in steady
state, one supervision tick (snapshot + ``supervise.check``, median of 20), the threads this
process runs, and how long after ``--heartbeat-timeout`` one rank that goes silent is named
(or the false fault a healthy job showed: heartbeats the server did not read in time). The
workers share this machine's cores with the server; on a real cluster the ranks are elsewhere.

    python -m ringtrain.bench.launcher.control_scale [--sizes 8,80,800,8000]

Above 8,000 ranks (issue 41): each block of ``PER_SOURCE`` simulated ranks connects from a
loopback address of its own (127.2.B.1; one address's ephemeral ports ran out near 28,000),
the workers grow so that none holds more than ``PER_WORKER`` connections, and the server's
descriptor limit is raised to what the size needs when this process may (root: up to
``fs.nr_open``); where it may not, the size is refused with the limit it met. What one
connection per rank costs the launcher at 80,000 (descriptors, CPU, tick) is the question.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import resource
import selectors
import socket
import statistics
import threading
import time
from typing import Any

from ringtrain.bench.launcher import simhubs
from ringtrain.bench.monitor import own_seconds
from ringtrain.hostfile import Host, Inventory, allocate
from ringtrain.launch.control.server import ControlServer
from ringtrain.launch.record.result import FailureKind
from ringtrain.launch.supervise.detect import check
from ringtrain.rank.events import (
    HEARTBEAT_S,
    PROTOCOL,
    Seal,
    answer,
    encode,
    identity,
    rank_seals,
)
from ringtrain.spec import SupervisionPolicy

PER_HOST = 8
PER_SOURCE = 16000  # connections from one loopback source address (28,228 ephemeral ports)
PER_WORKER = 8000  # connections one worker process holds
IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h


def _who(rank: int) -> dict[str, Any]:
    """A simulated rank's identity fields (its hello's)."""
    return {"rank": rank, "host": f"sim{rank // PER_HOST:05d}", "pid": 100000 + rank,
            "start": 1, "ppid": 1, "parent": "orted", "parent_start": 1}


def raise_fd_limit(wanted: int = 0) -> int:
    """The soft descriptor limit up to the hard one, and both up to ``wanted`` where this
    process may (root); the soft limit it got."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if wanted > hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def source_for(rank: int) -> str:
    """The loopback address a simulated rank connects from: one per PER_SOURCE ranks."""
    return f"127.2.{rank // PER_SOURCE}.1"


def _connect(addr: tuple[str, int], rank: int) -> socket.socket:
    """A simulated rank's connection from its source address; the port is chosen at connect
    (IP_BIND_ADDRESS_NO_PORT), so a port held in TIME_WAIT toward an earlier size's server
    is reused toward this one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    sock.bind((source_for(rank), 0))
    sock.connect(addr)
    return sock


def _check_in(addr: tuple[str, int], token: str, ranks: list[int],
              sel: selectors.BaseSelector) -> tuple[dict[int, socket.socket], dict[int, Seal]]:
    """Connect every rank, say hello and answer each challenge as it comes; each rank's
    socket (registered with ``sel``) and the seal of its messages."""
    socks: dict[int, socket.socket] = {}
    seals: dict[int, Seal] = {}  # each rank's messages sealed as a real rank's (events.py)
    heard: dict[int, bytes] = {}  # the challenge so far, per rank still checking in

    def answer_ready(timeout: float) -> None:
        """Answer every challenge that has come, as a rank answers its own at once (the
        server drops a connection that has not proved the token in time)."""
        for key, _ in sel.select(timeout=timeout):
            rank = key.data
            if rank is None:  # checked in: the launcher's beats, drained
                with contextlib.suppress(OSError):
                    key.fileobj.recv(65536)  # type: ignore[union-attr]
                continue
            try:
                chunk = key.fileobj.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if not chunk:
                raise SystemExit(f"the control server closed rank {rank}'s connection before "
                                 f"its challenge: {heard[rank]!r}")
            heard[rank] += chunk
            line = heard[rank]
            if not line.endswith(b"\n"):
                continue
            reply = answer(token, f"{rank:032x}", identity(_who(rank)), line)
            assert reply is not None, f"the control server's challenge to rank {rank}: {line!r}"
            socks[rank].setblocking(True)
            socks[rank].sendall(reply)
            socks[rank].setblocking(False)
            seals[rank] = rank_seals(token, f"{rank:032x}", line)[0]
            del heard[rank]
            sel.modify(socks[rank], selectors.EVENT_READ, None)

    for rank in ranks:  # every rank at once, as fast as this process connects them
        sock = _connect(addr, rank)
        nonce = f"{rank:032x}"  # a simulation: any hex does; a real rank's is random
        sock.sendall(encode("hello", proto=PROTOCOL, nonce=nonce, **_who(rank)))
        sock.setblocking(False)
        socks[rank], heard[rank] = sock, b""
        sel.register(sock, selectors.EVENT_READ, rank)
        answer_ready(0)
    while heard:
        answer_ready(1.0)
    return socks, seals


def _hub_worker(addr: tuple[str, int], token: str, hosts: list[int], silence: Any,
                stop: Any) -> None:
    """One process of simulated hosts' hubs (simhubs.py): one connection per host."""
    raise_fd_limit(len(hosts) + 256)
    sel = selectors.DefaultSelector()
    hubs = simhubs.check_in(lambda host: _connect(addr, host * PER_HOST), token, hosts,
                            PER_HOST, _who, sel)
    simhubs.beat_loop(hubs, PER_HOST, silence, stop, sel)
    for sock, _ in hubs.values():
        sock.close()


def _worker(addr: tuple[str, int], token: str, ranks: list[int], silence: Any,
            stop: Any) -> None:
    """One process of simulated ranks: connect, hello, answer the challenge, heartbeat;
    ``silence`` holds the rank that must go quiet (-1: none)."""
    raise_fd_limit(len(ranks) + 256)
    sel = selectors.DefaultSelector()
    socks, seals = _check_in(addr, token, ranks, sel)
    next_beat = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_beat:
            quiet = silence.value  # a rank, or -2 - h: every rank of host h
            host = -2 - quiet if quiet <= -2 else -1
            for rank, sock in socks.items():
                if rank != quiet and rank // PER_HOST != host:
                    with contextlib.suppress(OSError):  # a full buffer drops this beat
                        sock.send(seals[rank].seal("hb", rank=rank))
            next_beat = now + HEARTBEAT_S
        for key, _ in sel.select(timeout=0.1):
            with contextlib.suppress(OSError):
                key.fileobj.recv(65536)  # type: ignore[union-attr]
    for sock in socks.values():
        sock.close()


def _named_after(
    server: ControlServer, alloc: Any, policy: SupervisionPolicy, t0: float, silence: Any,
    quiet: int, kind: FailureKind, ranks: tuple[int, ...],
) -> tuple[float | None, str]:
    """Silence ``quiet`` (a rank, or -2 - h for host h); seconds until supervision names
    exactly that, or (None, the wrong fault it named instead)."""
    silence.value = quiet
    quiet_from = time.monotonic()
    while time.monotonic() - quiet_from < policy.heartbeat_timeout + 30:
        fault = check(server.snapshot(), alloc, policy, t0)
        if fault is not None:
            if fault.kind is not kind or fault.ranks != ranks:
                return None, fault.message
            return time.monotonic() - quiet_from, ""
        time.sleep(policy.poll_s)
    return None, ""


def run_size(n: int, workers: int, heartbeat_timeout: float,
             hubs: bool = False) -> dict[str, Any]:
    conns = n // PER_HOST if hubs else n
    limit = raise_fd_limit(conns + 1024)
    if limit < conns + 256:
        raise SystemExit(f"{n} ranks need {n + 256} descriptors in the launcher; this process "
                         f"may open {limit} (ulimit -n; root may raise it to fs.nr_open)")
    workers = max(workers, -(-conns // PER_WORKER))
    server = ControlServer("127.0.0.1", ranks=n, per_host=PER_HOST if hubs else None,
                           connections=conns)
    host, port = server.address.rsplit(":", 1)
    ctx = mp.get_context("fork")
    silence = ctx.Value("i", -1)
    stop = ctx.Event()
    chunks = [list(range(i, conns, workers)) for i in range(workers)]
    procs = [ctx.Process(target=_hub_worker if hubs else _worker,
                         args=((host, int(port)), server.token, c, silence, stop),
                         daemon=True) for c in chunks if c]
    started = time.perf_counter()
    for p in procs:
        p.start()
    while len(server.snapshot().ranks) < n:
        if time.perf_counter() - started > 600:
            raise SystemExit(f"only {len(server.snapshot().ranks)}/{n} ranks checked in")
        time.sleep(0.05)
    checkin = time.perf_counter() - started
    inventory = Inventory(tuple(Host(f"sim{h:05d}", PER_HOST) for h in range(n // PER_HOST)))
    alloc = allocate(inventory, n)
    policy = SupervisionPolicy(heartbeat_timeout=heartbeat_timeout)
    t0 = time.monotonic()
    time.sleep(2 * HEARTBEAT_S)  # steady state
    cpu0, wall0 = own_seconds(), time.perf_counter()
    time.sleep(5)
    cpu_per_s = (own_seconds() - cpu0) / (time.perf_counter() - wall0)
    ticks = []
    false_fault = ""
    for _ in range(20):
        tick0 = time.perf_counter()
        fault = check(server.snapshot(), alloc, policy, t0)
        ticks.append(time.perf_counter() - tick0)
        if fault is not None and not false_fault:
            false_fault = fault.message  # a healthy job: heartbeats were not read in time
    threads = threading.active_count()
    detected = host_detected = None
    if not false_fault:
        detected, false_fault = _named_after(
            server, alloc, policy, t0, silence, n // 2, FailureKind.RANK_SILENT, (n // 2,))
    if detected is not None and n >= 2 * PER_HOST:
        lost = n // PER_HOST - 1  # the last host: every rank on it goes quiet
        silence.value = -1
        time.sleep(2 * HEARTBEAT_S)  # the silent rank beats again first
        host_detected, false_fault = _named_after(
            server, alloc, policy, t0, silence, -2 - lost, FailureKind.HOST_LOST,
            tuple(range(lost * PER_HOST, (lost + 1) * PER_HOST)))
    stop.set()
    for p in procs:
        p.join(timeout=10)
    server.close()
    nan = float("nan")
    return {"checkin_s": checkin, "cpu_per_s": cpu_per_s, "tick_ms": statistics.median(ticks) * 1e3,
            "threads": threads, "detect_s": detected if detected is not None else nan,
            "host_detect_s": host_detected if host_detected is not None else nan,
            "false_fault": false_fault}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="8,80,800,8000")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--heartbeat-timeout", type=float, default=5.0)
    p.add_argument("--hubs", choices=("off", "on", "both"), default="off",
                   help="the ranks' hosts speak through hubs (rank/hub.py, one connection "
                   "per host of 8 ranks); both: each size without, then with, side by side")
    args = p.parse_args(argv)
    raise_fd_limit()
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.hubs]
    print(f"{'ranks':>6} {'via':>5} {'check-in':>9} {'server CPU':>11} {'tick':>9} "
          f"{'threads':>8} {'silent rank named':>18} {'lost host named':>16}")
    for n in (int(s) for s in args.sizes.split(",")):
        for hubs in modes:
            if n > PER_WORKER:
                print(f"{n} ranks {'through hubs' if hubs else 'direct'} ...", flush=True)
            try:
                r = run_size(n, args.workers, args.heartbeat_timeout, hubs)
            except SystemExit as err:  # this size cannot run here: the next one may
                print(f"{n:>6} {'hubs' if hubs else 'ranks':>5}  not measured: {err}",
                      flush=True)
                continue
            print(f"{n:>6} {'hubs' if hubs else 'ranks':>5} {r['checkin_s']:>8.2f}s "
                  f"{r['cpu_per_s'] * 100:>9.1f}% {r['tick_ms']:>7.2f}ms {r['threads']:>8.0f} "
                  f"{r['detect_s']:>7.2f}s (timeout {args.heartbeat_timeout:g} s) "
                  f"{r['host_detect_s']:>8.2f}s", flush=True)
            if r["false_fault"]:
                print(f"       FALSE FAULT in a healthy job: {r['false_fault']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
