"""``ringtrain sim up --hdfs``: the test HDFS (minihdfs.py, a NameNode and DataNodes in one JVM)
on the simulated cluster's bridge address, where the hosts' network namespaces reach both the
NameNode and the DataNodes, with no client configuration. It runs in its own session and
outlives the command that started it; ``sim down`` stops it by PID.

``state_dir`` keeps ``server.json`` (PID, URL, port), the JVM's log (``minihdfs.log``; the
previous run's in ``minihdfs.log.1``) and the data, which lasts as long as the server: a new
one starts with an empty filesystem, on the previous port when that is still free.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ringtrain.errors import SetupError
from ringtrain.rank import procfs
from ringtrain.sim import minihdfs
from ringtrain.sim.ports import ports_free, server_state
from ringtrain.sim.proc import alive

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # servers this process started (to reap)


@dataclass(frozen=True, slots=True)
class HdfsServer:
    pid: int
    url: str  # hdfs://IP:PORT
    state_dir: Path

    def running(self) -> bool:
        return _ours(self.pid, self.state_dir)


def start_hdfs_server(state_dir: Path, ip: str, *, datanodes: int = 1,
                      timeout: float = minihdfs.START_TIMEOUT_S) -> HdfsServer:
    """Start the minicluster on ``ip`` with its state in ``state_dir``; return once every
    DataNode has registered. If the server of ``state_dir`` is already running, that one."""
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise SetupError(f"the HDFS server needs an IPv4 address to listen on, not {ip!r}",
                         "pass the simulated cluster's bridge address") from None
    if datanodes < 1:
        raise SetupError(f"the HDFS server needs at least one DataNode, not {datanodes}",
                         "pass datanodes=1 or more")
    state_dir = state_dir.absolute()
    existing = running_hdfs_server(state_dir)
    if existing is not None:
        log.info("HDFS server of %s already running (pid %d)", state_dir, existing.pid)
        return existing
    cache = minihdfs.build()
    state_dir.mkdir(parents=True, exist_ok=True)
    old_port = server_state(state_dir).get("port")
    port = old_port if isinstance(old_port, int) and ports_free((old_port,), ip) else 0
    log_path, out_path = state_dir / "minihdfs.log", state_dir / "minihdfs.out"
    if log_path.exists():
        log_path.replace(state_dir / "minihdfs.log.1")
    with log_path.open("wb") as err, out_path.open("wb") as out:
        proc = subprocess.Popen(minihdfs.java_argv(cache, state_dir, ip, port, datanodes, True),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=state_dir, start_new_session=True)
    _CHILDREN[proc.pid] = proc
    try:
        url = _wait_ready(proc, out_path, log_path, timeout)
    except BaseException:
        _stop(proc.pid, 5.0)
        raise
    state = {"pid": proc.pid, "url": url, "port": int(url.rsplit(":", 1)[1]),
             "started": time.time()}
    (state_dir / "server.json").write_text(json.dumps(state, indent=1) + "\n")
    log.info("HDFS server (MiniDFSCluster, pid %d) ready at %s", proc.pid, url)
    return HdfsServer(proc.pid, url, state_dir)


def _wait_ready(proc: subprocess.Popen[bytes], out_path: Path, log_path: Path,
                timeout: float) -> str:
    """The URL of the READY line the JVM prints once the cluster is up."""
    deadline = time.monotonic() + timeout
    while True:
        for line in out_path.read_text(errors="replace").splitlines():
            if line.startswith("READY "):
                return line.split(" ", 1)[1].strip()
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise SetupError(f"the HDFS server did not start in {timeout:.0f} s "
                             f"(exit {proc.poll()}): {tail}", f"see {log_path}")
        time.sleep(0.2)


def running_hdfs_server(state_dir: Path) -> HdfsServer | None:
    """The server recorded in ``state_dir`` if its process is alive, else None."""
    state_dir = state_dir.absolute()
    state = server_state(state_dir)
    pid, url = state.get("pid"), state.get("url")
    if not isinstance(pid, int) or not isinstance(url, str) or not _ours(pid, state_dir):
        return None
    return HdfsServer(pid, url, state_dir)


def stop_hdfs_server(state_dir: Path, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the server recorded in ``state_dir/server.json``; False if none was running."""
    server = running_hdfs_server(state_dir)
    if server is None:
        return False
    _stop(server.pid, timeout)
    return True


def _ours(pid: int, state_dir: Path) -> bool:
    """``pid`` is alive and is the minicluster JVM of ``state_dir`` (not a reused PID)."""
    cmdline = procfs.cmdline(pid)
    return _alive(pid) and "MiniHdfs" in cmdline and str(state_dir / "data") in cmdline


def _stop(pid: int, timeout: float) -> None:
    """SIGTERM (the JVM shuts the cluster down and exits), SIGKILL after ``timeout``. The caller
    made sure ``pid`` is the minicluster's; a PID is not reused while any of its threads runs."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not _alive(pid):
            break
        if sig == signal.SIGKILL:
            log.warning("HDFS server pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait(timeout=30)


def _alive(pid: int) -> bool:
    """Until the JVM is gone: while its threads shut the cluster down, the thread that exited
    first (the process's leader) already reads as a zombie."""
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        return alive(pid) or len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
