"""A checkpoint store: the few storage operations the commit protocol needs, over fsspec.

Every operation goes through ``Store._run``: an optional hook is called before and after it
(fault-injection tests kill the process there; ``chunk`` hooks fire inside a streamed upload),
transient errors are retried with backoff (retry.py), and what still fails becomes a
``StorageError`` naming the operation and the URL, with a fix hint. Paths given to a Store are
relative to its root and '/'-separated.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import posixpath
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ringtrain.checkpoint import hdfs_errors
from ringtrain.checkpoint.filesystems import (
    Location,
    create_exclusive,
    make_filesystem,
    parse_url,
    sync_file,
)
from ringtrain.checkpoint.retry import RetryPolicy, call_with_retry, describe, is_transient
from ringtrain.errors import CheckpointError

log = logging.getLogger(__name__)

T = TypeVar("T")
Hook = Callable[[str, str, str], None]  # (phase: before|after|chunk, operation, relative path)
MIB = 1 << 20


class StorageError(CheckpointError):
    """A storage operation failed for good (after retries, or at once if not transient)."""

    def __init__(self, op: str, url: str, cause: BaseException) -> None:
        super().__init__(f"{op} {url} failed: {describe(cause)}", _hint(cause))
        self.op = op
        self.url = url
        self.missing = isinstance(cause, FileNotFoundError)
        self.transient = is_transient(cause)


def _hint(err: BaseException) -> str:
    hdfs = hdfs_errors.remote(err)
    if hdfs is not None and hdfs[0] in hdfs_errors.HINTS:
        return hdfs_errors.HINTS[hdfs[0]]
    names = {cls.__name__ for cls in type(err).__mro__}
    if "NoCredentialsError" in names:
        return "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
    if isinstance(err, PermissionError):
        return (
            "the storage refused the credentials or the request: check AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials), the bucket policy, the clock"
        )
    if isinstance(err, FileNotFoundError):
        return "the bucket or directory does not exist: create it, or fix the checkpoint URL"
    if is_transient(err):
        return (
            "the storage did not answer: check that it is up and that AWS_ENDPOINT_URL_S3 "
            "(or the HDFS namenode) points at it, then run again; the previous checkpoint is intact"
        )
    return "check the checkpoint URL and the storage's health, then run again"


HDFS_CALL_TIMEOUT_S = 60.0


def with_deadline(fn: Callable[[], T], seconds: float) -> Callable[[], T]:
    """``fn`` run in a daemon thread and given up on (TimeoutError: transient, retried) after
    ``seconds``. A call that never returns keeps its thread, blocked; training goes on."""

    def bounded() -> T:
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["value"] = fn()
            except BaseException as err:  # handed to the caller's thread
                box["error"] = err

        worker = threading.Thread(target=call, name="storage-call", daemon=True)
        worker.start()
        worker.join(seconds)
        if worker.is_alive():
            raise TimeoutError(f"no answer in {seconds:.0f} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    return bounded


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # base name
    size: int
    is_dir: bool


@dataclass(frozen=True, slots=True)
class Store:
    location: Location
    fs: Any
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    hook: Hook | None = None
    chunk_bytes: int = 8 * MIB
    # HDFS: hdfs-native (0.14) waits forever for a NameNode that is down (found against a real
    # one), so each call gets a deadline: this many seconds, plus 1 s per 5 MB it moves
    call_timeout_s: float = HDFS_CALL_TIMEOUT_S

    @property
    def url(self) -> str:
        return self.location.url

    def url_of(self, rel: str) -> str:
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url

    def abspath(self, rel: str) -> str:
        root = self.location.root.rstrip("/")
        return f"{root}/{rel}" if rel else root

    @property
    def is_hdfs(self) -> bool:
        return self.location.protocol in ("hdfs", "viewfs")

    def with_hook(self, hook: Hook | None) -> Store:
        return replace(self, hook=hook)

    def _run(self, op: str, rel: str, fn: Callable[[], T], nbytes: int = 0) -> T:
        if self.hook:
            self.hook("before", op, rel)
        if self.is_hdfs:
            fn = with_deadline(fn, self.call_timeout_s + nbytes / 5e6)
        try:
            result = call_with_retry(fn, what=f"{op} {self.url_of(rel)}", policy=self.retry)
        except CheckpointError:
            raise
        except Exception as err:
            raise StorageError(op, self.url_of(rel), err) from err
        if self.hook:
            self.hook("after", op, rel)
        return result

    # -- writing ---------------------------------------------------------------------------
    def put_file(self, rel: str, local: Path) -> None:
        """Upload a local file (replacing what is there: attempt directories are private)."""
        path = self.abspath(rel)
        if self.location.protocol == "s3":
            # s3fs: one PUT below 2 chunks, else a concurrent multipart upload.
            self._run("put", rel, lambda: self.fs.put_file(str(local), path))
            return
        self._run("put", rel, lambda: self._stream_put(rel, path, local),
                  nbytes=local.stat().st_size)

    def _stream_put(self, rel: str, path: str, local: Path) -> None:
        with open(local, "rb") as src, self.fs.open(path, "wb") as dst:
            while chunk := src.read(self.chunk_bytes):
                if self.hook:
                    self.hook("chunk", "put", rel)
                dst.write(chunk)
            dst.flush()
            sync_file(dst)

    def put_bytes(self, rel: str, data: bytes) -> None:
        self._run("put", rel, lambda: self.fs.pipe_file(self.abspath(rel), data))

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` with ``data`` unless it exists (then False). The commit point."""
        return self._run(
            "create",
            rel,
            lambda: create_exclusive(self.fs, self.location.protocol, self.abspath(rel), data),
        )

    # -- reading ---------------------------------------------------------------------------
    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The file's bytes; with ``limit``, at most ``limit + 1`` of them (more than ``limit``
        means too big: a caller with a cap never reads a whole planted file)."""
        if limit is None:
            data: bytes = self._run("get", rel, lambda: self.fs.cat_file(self.abspath(rel)))
            return data
        return self._run("get", rel, lambda: self._read_head(self.abspath(rel), limit + 1))

    def _read_head(self, path: str, want: int) -> bytes:
        out = bytearray()
        block = None if self.is_hdfs else self.chunk_bytes  # hdfs-native: see _stream_hash
        with self.fs.open(path, "rb", block_size=block) as src:
            while len(out) < want and (chunk := src.read(min(self.chunk_bytes, want - len(out)))):
                out += chunk
        return bytes(out)

    def hash_file(self, rel: str, copy_to: Path | None = None) -> tuple[int, str]:
        """(size, sha256) of a stored file, streamed; optionally saved to ``copy_to`` meanwhile."""
        return self._run("get", rel, lambda: self._stream_hash(self.abspath(rel), copy_to))

    def _stream_hash(self, path: str, copy_to: Path | None) -> tuple[int, str]:
        digest, size = hashlib.sha256(), 0
        with contextlib.ExitStack() as stack:
            # hdfs-native (0.14) wraps its raw reader in io.BufferedReader when given a block
            # size, and the raw reader has no readinto(): every read raised NotImplementedError
            # (found against a real NameNode). Its raw reader reads by size itself.
            block = None if self.is_hdfs else self.chunk_bytes
            src = stack.enter_context(self.fs.open(path, "rb", block_size=block))
            out = stack.enter_context(open(copy_to, "wb")) if copy_to is not None else None
            while chunk := src.read(self.chunk_bytes):
                digest.update(chunk)
                size += len(chunk)
                if out is not None:
                    out.write(chunk)
        return size, digest.hexdigest()

    def list_dir(self, rel: str) -> tuple[Entry, ...]:
        """Direct children of ``rel``; a missing directory is empty."""
        return self._run("list", rel, lambda: self._list(self.abspath(rel)))

    def _list(self, path: str) -> tuple[Entry, ...]:
        try:
            infos = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            self._bucket_exists()
            return ()
        out = []
        for info in infos:
            name = posixpath.basename(str(info["name"]).rstrip("/"))
            is_dir = info.get("type") == "directory"
            out.append(Entry(name, int(info.get("size") or 0), is_dir))
        return tuple(sorted(out, key=lambda e: e.name))

    def _bucket_exists(self) -> None:
        """On S3 a missing bucket lists like an empty prefix ("no checkpoints"): said instead
        (FileNotFoundError: a permanent error whose hint is to create it or fix the URL)."""
        if self.location.protocol != "s3":
            return
        bucket = self.location.root.strip("/").split("/", 1)[0]
        try:
            self.fs.info(bucket)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, f"there is no bucket {bucket!r}") from None

    def find_files(self, rel: str) -> dict[str, int]:
        """Every file below ``rel``: path relative to ``rel`` -> size."""
        return self._run("list", rel, lambda: self._find(self.abspath(rel)))

    def _find(self, base: str) -> dict[str, int]:
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        base_stripped = self.fs._strip_protocol(base).rstrip("/") + "/"
        out = {}
        for name, info in found.items():
            path = self.fs._strip_protocol(name)
            if info.get("type", "file") == "file" and path.startswith(base_stripped):
                out[path[len(base_stripped) :]] = int(info.get("size") or 0)
        return out

    # -- deleting --------------------------------------------------------------------------
    def remove(self, rel: str) -> None:
        """Delete one file; a missing one is fine."""
        self._run("delete", rel, lambda: self._rm(self.abspath(rel), recursive=False))

    def remove_tree(self, rel: str) -> None:
        """Delete a directory (prefix) and everything below; a missing one is fine."""
        self._run("delete", rel, lambda: self._rm(self.abspath(rel), recursive=True))

    def _rm(self, path: str, recursive: bool) -> None:
        dirs: list[str] = []
        if recursive and self.location.protocol == "s3":
            found = self.fs.find(path, withdirs=True, detail=True)
            dirs = [n for n, i in found.items() if i.get("type") == "directory"] + [path]
        try:
            self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            log.debug("already gone: %s", path)
        # Servers with real directories (SeaweedFS) keep empty ones listed until their
        # "dir/" key is deleted; on AWS deleting a missing key is a no-op. Deepest first.
        for d in sorted(set(dirs), key=len, reverse=True):
            self.fs.rm_file(d.rstrip("/") + "/")


def open_store(
    url: str,
    *,
    retry: RetryPolicy | None = None,
    hook: Hook | None = None,
    chunk_bytes: int = 8 * MIB,
    options: Mapping[str, Any] | None = None,
    call_timeout_s: float = HDFS_CALL_TIMEOUT_S,
) -> Store:
    """A Store for ``url`` (local path, file://, s3://, hdfs://, viewfs://).

    ``options``: filesystem constructor arguments (backends.make_filesystem); normally none.
    """
    location = parse_url(url)
    fs = make_filesystem(location, options)
    return Store(location, fs, retry or RetryPolicy(), hook, chunk_bytes, call_timeout_s)
