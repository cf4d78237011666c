"""A real HDFS for the tests and ``ringtrain sim up --hdfs``: Apache Hadoop's MiniDFSCluster (a
NameNode and DataNodes in one JVM), started by ``minihdfs/MiniHdfs.java``, on one address:
127.0.0.1 for the tests, or the simulated cluster's bridge address, which the hosts' network
namespaces reach (hdfsserver.py). Every port clients use is on that address (the web servers
stay on 127.0.0.1), and clients there need no configuration. MiniDFSCluster's DataNodes would
reach the NameNode at localhost, and a DataNode registers with the address its registration
came from, so clients would be sent to 127.0.0.1 (their own loopback, in a namespace); the
launcher gives the NameNode a service RPC address on the cluster's address, through which the
DataNodes register instead (and names that address as their hostname, for clients with
``dfs.client.use.datanode.hostname``).

``build()`` fetches the pinned Hadoop client artifacts with Maven (``minihdfs/pom.xml``; Maven
verifies their checksums) and compiles the launcher, once, into a cache directory
(``$RINGTRAIN_SIM_CACHE`` or ``~/.cache/ringtrain``); it needs Java 17 and Maven. ``start()`` runs
the cluster on an address and port, waits until it is out of safe mode with every DataNode
registered, and returns a ``MiniHdfs``: its ``url``, ``command()`` for faults (restart or stop
the NameNode, safe mode, a space quota, a directory owned by another user, DataNodes
stopped and restarted) and ``stop()``, which ends it by PID. It lives as long as this process
(its commands come on a pipe); ``java_argv(..., serve=True)`` runs one without commands until
SIGTERM.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ringtrain.errors import SetupError

log = logging.getLogger(__name__)

HADOOP_VERSION = "3.5.0"  # the pom's; the cache directory is per version
SOURCE = Path(__file__).parent / "minihdfs"
START_TIMEOUT_S = 180.0
COMMAND_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    root = os.environ.get("RINGTRAIN_SIM_CACHE") or str(Path.home() / ".cache" / "ringtrain")
    return Path(root) / f"minihdfs-{HADOOP_VERSION}"


def build(cache: Path | None = None) -> Path:
    """The directory holding ``lib/`` (Hadoop's jars) and ``classes/`` (the launcher): fetched
    and compiled on first use, then reused."""
    cache = cache or cache_dir()
    lib, classes = cache / "lib", cache / "classes"
    source = hashlib.sha256((SOURCE / "MiniHdfs.java").read_bytes()).hexdigest()
    fetched = any(lib.glob("hadoop-client-minicluster-*"))
    stamp = classes / "source.sha256"
    if fetched and stamp.is_file() and stamp.read_text() == source:
        return cache
    for tool in ("mvn", "javac", "java"):
        if shutil.which(tool) is None:
            raise SetupError(f"the test HDFS needs {tool} (Java 17 and Maven)",
                             "apt-get install openjdk-17-jdk-headless maven")
    cache.mkdir(parents=True, exist_ok=True)
    if not fetched:
        log.warning("fetching Apache Hadoop %s's minicluster with Maven into %s (once)",
                    HADOOP_VERSION, cache)
        _run(["mvn", "-q", "-B", "-f", str(SOURCE / "pom.xml"), "dependency:copy-dependencies",
              f"-DoutputDirectory={lib}"], "fetch Hadoop's minicluster with Maven")
    tmp = cache / "classes.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["javac", "-d", str(tmp), "-cp", f"{lib}/*", str(SOURCE / "MiniHdfs.java")],
         "compile the minicluster launcher")
    (tmp / "source.sha256").write_text(source)
    shutil.rmtree(classes, ignore_errors=True)
    tmp.rename(classes)
    return cache


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise SetupError(f"could not {what} ({' '.join(argv[:2])} exited {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr).strip()[-1500:]}",
                         "check the network to Maven Central and the Java installation")


@dataclass
class MiniHdfs:
    """A running minicluster (``start``)."""

    url: str  # hdfs://HOST:PORT
    proc: subprocess.Popen[str]
    base: Path
    log_path: Path
    _answers: queue.Queue[str] = field(default_factory=queue.Queue)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self, line: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Send one of MiniHdfs.java's commands; its answer ("OK ..."), or SetupError."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise SetupError(f"the test HDFS did not answer {line!r} in {timeout:.0f} s",
                             f"see {self.log_path}") from None
        if not answer.startswith("OK"):
            raise SetupError(f"the test HDFS refused {line!r}: {answer}", f"see {self.log_path}")
        return answer

    def stop(self, timeout: float = 30.0) -> None:
        """End the JVM (its shutdown hook stops the cluster), by PID; SIGKILL if it lingers."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # end of commands: it shuts down and exits
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(base: Path, host: str = "127.0.0.1", port: int = 0, datanodes: int = 1,
          timeout: float = START_TIMEOUT_S) -> MiniHdfs:
    """Start a minicluster keeping its data under ``base`` (port 0: a free one) and wait until
    it is ready. It takes commands (``MiniHdfs.command``) and ends with this process's
    ``stop()`` or exit."""
    cache = build()
    base.mkdir(parents=True, exist_ok=True)
    log_path = base / "minihdfs.log"
    with log_path.open("a") as log_file:
        proc = subprocess.Popen(java_argv(cache, base, host, port, datanodes),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
                                text=True, start_new_session=True)
    cluster = MiniHdfs("", proc, base, log_path)
    ready: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.strip()
            if line.startswith("READY "):
                ready.put(line.split(" ", 1)[1])
            elif line.startswith(("OK", "ERR")):
                cluster._answers.put(line)

    threading.Thread(target=read, name="minihdfs-out", daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.url = ready.get(timeout=0.5)
            return cluster
        except queue.Empty:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            cluster.stop(timeout=5)
            _failed(timeout, proc.returncode, log_path)


def java_argv(cache: Path, base: Path, host: str, port: int, datanodes: int,
              serve: bool = False) -> list[str]:
    """The JVM's command line (``cache``: ``build()``'s); data under ``base / "data"``.
    ``serve``: no commands on stdin, it runs until SIGTERM (MiniHdfs.java)."""
    return ["java", "-Xmx512m", "-cp", f"{cache / 'lib'}/*:{cache / 'classes'}", "MiniHdfs",
            str(base / "data"), host, str(port), str(datanodes), *(["serve"] if serve else [])]


def _failed(timeout: float, status: int | None, log_path: Path) -> None:
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    raise SetupError(f"the test HDFS did not start in {timeout:.0f} s (exit {status}): {tail}",
                     f"see {log_path}")
