"""Pure parts of ringtrain.checkpoint: manifest format and names, URLs, retry classification."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringtrain.checkpoint.filesystems import Location, is_precondition_failed, parse_url
from ringtrain.checkpoint.manifest import (
    FileEntry,
    Manifest,
    attempt_created,
    check_relpath,
    from_json,
    manifest_name,
    new_attempt,
    step_of_manifest,
    to_json,
)
from ringtrain.checkpoint.retry import RetryPolicy, call_with_retry, is_transient
from ringtrain.errors import CheckpointError

SHA = "ab" * 32


def _manifest(step: int = 7, files: tuple[FileEntry, ...] | None = None) -> Manifest:
    attempt = new_attempt(step, datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    files = files or (FileEntry("ckpt.index", 10, SHA), FileEntry("sub/x.bin", 0, "cd" * 32))
    return Manifest(step, 2, f"data/{attempt}", files, "2026-01-02T03:04:05Z", {"loss": 0.5})


_segment = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(
    step=st.integers(0, 10**12 - 1),
    epoch=st.integers(0, 10**6),
    paths=st.lists(st.lists(_segment, min_size=1, max_size=3).map("/".join), min_size=1,
                   max_size=5, unique=True),
    sizes=st.lists(st.integers(0, 2**40), min_size=5, max_size=5),
)
def test_manifest_round_trips(step: int, epoch: int, paths: list[str], sizes: list[int]) -> None:
    files = tuple(FileEntry(p, s, SHA) for p, s in zip(paths, sizes, strict=False))
    m = Manifest(step, epoch, f"data/{new_attempt(step)}", files, "2026-01-01T00:00:00Z", {"a": 1})
    back = from_json(to_json(m), manifest_name(step))
    assert back == m
    assert step_of_manifest(m.name) == step
    assert back.total_bytes == sum(f.size for f in files)


def test_names_sort_by_step_and_reject_strangers() -> None:
    assert manifest_name(42) == "ckpt-000000000042.json"
    names = [manifest_name(s) for s in (3, 100, 20)]
    assert sorted(names) == [manifest_name(s) for s in (3, 20, 100)]
    for other in (".tmp-ckpt-000000000042.json-abc", "ckpt-42.json", "ckpt-000000000042.json.x"):
        assert step_of_manifest(other) is None
    with pytest.raises(CheckpointError):
        manifest_name(-1)


def test_attempt_names_carry_their_creation_time() -> None:
    when = datetime(2026, 11, 21, 20, 15, 0, tzinfo=timezone.utc)
    name = new_attempt(420, when)
    assert name.startswith("000000000420-20261121T201500Z-")
    assert attempt_created(name) == when
    assert new_attempt(420, when) != name  # random token: two writers never share a directory
    assert attempt_created("not-an-attempt") is None


@pytest.mark.parametrize(
    "path", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a\\b", "a\nb", "x/"]
)
def test_unsafe_relative_paths_are_rejected(path: str) -> None:
    with pytest.raises(CheckpointError, match="unsafe"):
        check_relpath(path)


def _mutated(**changes: object) -> bytes:
    body = json.loads(to_json(_manifest()))
    body.update(changes)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "not JSON"),
        (to_json(_manifest())[:-20], "not JSON"),  # a truncated write
        (_mutated(format="other/1"), "format"),
        (_mutated(step=8), "does not match"),
        (_mutated(step=True), "non-negative"),
        (_mutated(epoch=-1), "non-negative"),
        (_mutated(data="../../elsewhere"), "attempt directory"),
        (_mutated(data="data/000000000007-bogus"), "attempt directory"),
        (_mutated(files=[]), "non-empty"),
        (_mutated(files=[{"path": "a", "size": 1, "sha256": "xyz"}]), "sha256"),
        (_mutated(files=[{"path": "../a", "size": 1, "sha256": SHA}]), "unsafe"),
        (_mutated(files=[{"path": "a", "size": 1, "sha256": SHA}] * 2), "duplicate"),
    ],
)
def test_invalid_manifests_are_rejected_with_a_reason(data: bytes, why: str) -> None:
    with pytest.raises(CheckpointError, match=why) as info:
        from_json(data, manifest_name(7))
    assert info.value.hint


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/tmp/ck", Location("file", "/tmp/ck")),
        ("file:///tmp/ck/", Location("file", "/tmp/ck")),
        ("s3://bucket", Location("s3", "bucket")),
        ("s3://bucket/runs/a/", Location("s3", "bucket/runs/a")),
        ("hdfs://nn:8020/user/x", Location("hdfs", "/user/x", "nn", 8020)),
        ("viewfs://cluster/user/x", Location("viewfs", "/user/x", "cluster", None)),
    ],
)
def test_urls_map_to_locations(url: str, expected: Location) -> None:
    assert parse_url(url) == expected


def test_location_urls_are_printable() -> None:
    assert parse_url("s3://b/p").url == "s3://b/p"
    assert parse_url("hdfs://nn:8020/x").url == "hdfs://nn:8020/x"
    assert parse_url("/tmp/x").url == "file:///tmp/x"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("s3://AKIA:secret@bucket/x", "credentials"),
        ("gs://bucket/x", "unsupported scheme"),
        ("file://host/x", "takes no host"),
        ("s3:///x", "no bucket"),
    ],
)
def test_bad_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(CheckpointError, match=why) as info:
        parse_url(url)
    assert "secret" not in info.value.message


class _ClientError(Exception):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def _translated(cause: BaseException, err: OSError) -> OSError:
    err.__cause__ = cause
    return err


def test_a_412_without_condition_counts_as_exists() -> None:
    # SeaweedFS: 412 without <Condition> -> s3fs raises OSError(EINVAL), not FileExistsError
    quirk = _translated(_ClientError(412, "PreconditionFailed"),
                        OSError(errno.EINVAL, "At least one of the pre-conditions ..."))
    assert is_precondition_failed(quirk)
    assert is_precondition_failed(FileExistsError("exists"))  # AWS proper
    other = _translated(_ClientError(400, "InvalidArgument"), OSError(errno.EINVAL, "bad arg"))
    assert not is_precondition_failed(other)
    assert not is_precondition_failed(OSError(errno.EIO, "boom"))


class EndpointConnectionError(Exception):
    """Named like botocore's: classified by name, no botocore import needed."""


@pytest.mark.parametrize(
    ("err", "transient"),
    [
        (ConnectionRefusedError(111, "refused"), True),
        (TimeoutError("slow"), True),
        (OSError(errno.EBUSY, "SlowDown"), True),
        (OSError(errno.EREMOTEIO, "InternalError"), True),
        (EndpointConnectionError("no"), True),
        (PermissionError("SignatureDoesNotMatch"), False),
        (FileNotFoundError("NoSuchKey"), False),
        (FileExistsError("exists"), False),
        (OSError(errno.ENOSPC, "disk full"), False),
        (OSError(errno.EINVAL, "bad"), False),
        (ValueError("bug"), False),
    ],
)
def test_transient_errors_are_told_apart(err: BaseException, transient: bool) -> None:
    assert is_transient(err) is transient


def test_retry_backs_off_then_succeeds() -> None:
    calls, sleeps = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError(104, "reset")
        return "ok"

    policy = RetryPolicy(attempts=5, initial_s=0.5, factor=2, max_s=8, jitter=0)
    assert call_with_retry(flaky, what="put x", policy=policy, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0]


def test_retry_gives_up_after_attempts_and_never_retries_permanent_errors() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=4, initial_s=1, factor=3, max_s=5, jitter=0)

    def down() -> None:
        raise ConnectionRefusedError(111, "refused")

    with pytest.raises(ConnectionRefusedError):
        call_with_retry(down, what="put", policy=policy, sleep=sleeps.append)
    assert sleeps == [1, 3, 5]

    def denied() -> None:
        raise PermissionError("denied")

    sleeps.clear()
    with pytest.raises(PermissionError):
        call_with_retry(denied, what="put", policy=policy, sleep=sleeps.append)
    assert sleeps == []


def test_s3_server_credentials_persist_and_stay_out_of_argv_and_repr(tmp_path: Path) -> None:
    from ringtrain.sim.s3server import (
        S3Server,
        _argv,
        _credentials,
        _write_client_files,
    )

    key, secret = _credentials(tmp_path, None, None)
    server = S3Server(1, "http://127.0.0.1:9", "b", key, secret, "us-east-1", tmp_path)
    _write_client_files(server)
    assert _credentials(tmp_path, None, None) == (key, secret)  # read back, not regenerated
    assert (tmp_path / "aws-credentials").stat().st_mode & 0o077 == 0
    config = (tmp_path / "aws-config").read_text()
    assert "endpoint_url = http://127.0.0.1:9" in config and "addressing_style = path" in config
    argv = _argv("weed", tmp_path / "data", dict.fromkeys(
        ("master", "volume", "filer", "s3", "admin"), 40000), "b", "/tmp/x")
    assert secret not in " ".join(argv) and key not in " ".join(argv)
    assert secret not in repr(server) and secret not in str(server.file_env())
    assert "-s3.port.grpc=50000" in argv and "-ip.bind=127.0.0.1" in argv
    assert argv[:3] == ["weed", "-v=0", "mini"]  # glog flags before the command, or weed refuses


def test_s3_readiness_tries_each_call_once_so_its_deadline_bounds_the_wait(tmp_path: Path) -> None:
    """A server that takes connections and never answers: one try of one call (a 5 s read
    timeout), then the error naming weed.log; not two tries of each of the probe's calls."""
    pytest.importorskip("s3fs")
    from ringtrain.errors import CheckpointError
    from ringtrain.sim.s3server import S3Server, _wait_ready

    with _silent_server() as (url, held):
        server = S3Server(os.getpid(), url, "b", "k", "s", state_dir=tmp_path)
        with pytest.raises(CheckpointError) as err:
            _wait_ready(server, timeout=0.5)
    assert len(held) == 1  # one request (the listing), not botocore's two
    assert "did not accept a write in 0.5 s (probes: 1, the last at" in err.value.message
    assert str(tmp_path / "weed.log") in err.value.message and "ReadTimeout" in err.value.message


def test_the_checkpoint_stores_s3_client_tries_a_call_once(tmp_path: Path) -> None:
    """The store's retries are ringtrain's RetryPolicy's (logged, the same for every backend):
    botocore tries each call once, so a silent endpoint costs one read timeout, not two."""
    pytest.importorskip("s3fs")
    from ringtrain.checkpoint.filesystems import _s3_filesystem

    with _silent_server() as (url, held):
        fs = _s3_filesystem({"endpoint_url": url, "key": "k", "secret": "s",
                             "config_kwargs": {"read_timeout": 1, "connect_timeout": 1}})
        with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
            fs.ls("bucket/prefix")
    assert len(held) == 1


@contextlib.contextmanager
def _silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """An endpoint that takes connections and never answers: its URL, and the connections
    it took (closed on the way out)."""
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as mute:
        def take() -> None:
            while True:
                try:
                    held.append(mute.accept()[0])
                except OSError:
                    return

        threading.Thread(target=take, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{mute.getsockname()[1]}", held
        finally:
            for conn in held:
                conn.close()


def test_s3_server_ports_avoid_a_grpc_socket_another_weed_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """weed names its gRPC Unix sockets in the temp dir by port alone: a server on another
    address (the simulated cluster's bridge) with the same port would share them."""
    import socket

    from ringtrain.sim import s3server

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(s3server.tempfile, "tempdir", None)
    first = s3server._ports({})
    grpc = first["master"] + s3server.GRPC_OFFSET
    with socket.socket(socket.AF_UNIX) as held:
        held.bind(str(tmp_path / f"seaweedfs-master-grpc-{grpc}.sock"))
        assert not s3server._socket_taken(first.values())  # a file nobody answers on: stale
        held.listen()
        assert s3server._socket_taken(first.values())
        again = s3server._ports({"ports": first})
        assert first["master"] not in again.values() and not s3server._socket_taken(again.values())
    assert s3server._ports({"ports": first}) == first  # a restart keeps its ports
