"""Map a checkpoint URL to an fsspec filesystem, and create a file exclusively on each backend.

* ``/path``, ``file:///path`` -> fsspec's LocalFileSystem.
* ``s3://bucket/prefix`` -> s3fs. Endpoint, region, credentials and addressing style come from
  the standard AWS sources only (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``,
  ``AWS_ACCESS_KEY_ID``..., ``~/.aws/config`` ``s3 = addressing_style = path``...), never argv.
* ``hdfs://namenode[:port]/path``, ``viewfs://`` -> hdfs-native (no JVM).

Exclusive create (the commit point) differs per backend:

* local: write a temp file, fsync, ``os.link`` it to the final name (fails if it exists);
* S3: ``PUT`` with ``If-None-Match: *``. SeaweedFS answers 412 without ``<Condition>``, which
  s3fs surfaces as ``OSError(EINVAL)`` instead of ``FileExistsError``: both mean "exists";
* HDFS: write a temp file, then rename without overwrite (the NameNode refuses if it exists).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Any

import fsspec  # type: ignore[import-untyped]
from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]

from ringtrain.checkpoint.location import SUPPORTED, Location, parse_url
from ringtrain.errors import CheckpointError

__all__ = ["SUPPORTED", "Location", "make_filesystem", "parse_url"]

log = logging.getLogger(__name__)

S3_CONNECT_TIMEOUT_S = 5
S3_READ_TIMEOUT_S = 60


def make_filesystem(loc: Location, options: Mapping[str, Any] | None = None) -> Any:
    """A fresh (uncached) fsspec filesystem for ``loc``.

    ``options`` go to the filesystem's constructor (for S3: ``key``, ``secret``,
    ``endpoint_url``, ``client_kwargs``...): for programs that hold credentials in memory, such as
    tests and the benchmark. Without them, the standard AWS environment and files apply.
    """
    try:
        if loc.protocol == "file":
            return LocalFileSystem(auto_mkdir=True)
        if loc.protocol == "s3":
            return _s3_filesystem(options or {})
        if loc.protocol == "hdfs" and loc.host and loc.port:
            _resolve_namenode(loc)
        return fsspec.filesystem(
            loc.protocol, host=loc.host, port=loc.port, skip_instance_cache=True,
            **dict(options or {}),
        )
    except RuntimeError as err:
        if loc.protocol in ("hdfs", "viewfs") and "No NameNode hosts found" in str(err):
            raise CheckpointError(
                f"{loc.url}: no NameNode for {loc.host!r}: the URL has no port, and the Hadoop "
                "configuration (HADOOP_CONF_DIR, hdfs-site.xml) names no nameservice so called",
                "add the NameNode's RPC port (hdfs://NAMENODE:8020/path), or point "
                "HADOOP_CONF_DIR at the cluster's configuration",
            ) from None
        if loc.protocol == "viewfs" and "viewfs" in str(err).lower():
            raise CheckpointError(
                f"{loc.url}: the Hadoop configuration has no mount table for viewfs://"
                f"{loc.host or ''} ({_first_line(str(err))})",
                "point HADOOP_CONF_DIR at the cluster's configuration (core-site.xml with "
                f"fs.viewfs.mounttable.{loc.host or 'NAME'}.link.* entries), or use the "
                "hdfs://NAMENODE:PORT/path the mount points to",
            ) from None
        if loc.protocol in ("hdfs", "viewfs"):  # hdfs-native's client refused the URL
            raise CheckpointError(f"{loc.url}: the HDFS client refused it: "
                                  f"{_first_line(str(err))}",
                                  "check the URL and HADOOP_CONF_DIR's configuration") from None
        raise
    except ImportError as err:
        extra = "s3" if loc.protocol == "s3" else "hdfs"
        raise CheckpointError(
            f"{loc.protocol}:// checkpoints need a package that is missing ({err.name})",
            f"pip install 'ringtrain[{extra}]'",
        ) from None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "no reason given"


def _resolve_namenode(loc: Location) -> None:
    """An unknown NameNode host is a mistake in the URL, said before any call: hdfs-native
    would wait for it for ever. Only for ``host:port`` (a name without a port may be an HA
    nameservice of hdfs-site.xml, which only the client resolves)."""
    try:
        socket.getaddrinfo(loc.host, loc.port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise CheckpointError(
            f"{loc.url}: the NameNode host {loc.host!r} cannot be resolved ({err})",
            "fix the host in the checkpoint URL (hdfs://NAMENODE:PORT/path), or its DNS "
            "or /etc/hosts entry",
        ) from None


def _s3_filesystem(options: Mapping[str, Any]) -> Any:
    import s3fs  # type: ignore[import-untyped]  # noqa: PLC0415 - optional extra ringtrain[s3]

    kwargs = dict(options)
    config = {
        "connect_timeout": S3_CONNECT_TIMEOUT_S,
        "read_timeout": S3_READ_TIMEOUT_S,
        # one try: botocore's max_attempts counts retries (1 meant two tries, two read
        # timeouts before the RetryPolicy); total_max_attempts counts tries
        "retries": {"total_max_attempts": 1, "mode": "standard"},
        **kwargs.pop("config_kwargs", {}),
    }
    kwargs.setdefault("max_concurrency", 4)
    fs = s3fs.S3FileSystem(
        skip_instance_cache=True, use_listings_cache=False, config_kwargs=config, **kwargs
    )
    fs.retries = 1  # ringtrain's RetryPolicy retries, with logging, for every backend alike
    return fs


def is_precondition_failed(err: BaseException) -> bool:
    """True for an S3 412 however s3fs chose to translate it (see the module docstring)."""
    if isinstance(err, FileExistsError):
        return True
    if not isinstance(err, OSError) or err.errno != errno.EINVAL:
        return False
    response = getattr(err.__cause__, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
        return bool(status == 412 or code == "PreconditionFailed")
    return "pre-condition" in str(err)


def create_exclusive(fs: Any, protocol: str, path: str, data: bytes) -> bool:
    """Write ``data`` at ``path`` only if nothing is there. False when something already is."""
    if protocol == "s3":
        try:
            fs.pipe_file(path, data, mode="create")
        except OSError as err:
            if is_precondition_failed(err):
                return False
            raise
        return True
    if protocol == "file":
        return _create_exclusive_local(path, data)
    return _create_exclusive_rename(fs, path, data)


def _tmp_name(path: str) -> str:
    head, _, tail = path.rpartition("/")
    return f"{head}/.tmp-{tail}-{secrets.token_hex(6)}"


def _create_exclusive_local(path: str, data: bytes) -> bool:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _tmp_name(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        return _create_exclusive_open(path, data)  # no hard links here: O_EXCL instead
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(os.path.dirname(path))
    return True


def _create_exclusive_open(path: str, data: bytes) -> bool:
    # A crash mid-write can leave a truncated manifest; readers reject it as invalid JSON.
    try:
        with open(path, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except FileExistsError:
        return False
    return True


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_exclusive_rename(fs: Any, path: str, data: bytes) -> bool:
    tmp = _tmp_name(path)
    with fs.open(tmp, "wb") as f:
        f.write(data)
    try:
        fs.mv(tmp, path, overwrite=False)
    except FileExistsError:
        _remove_quietly(fs, tmp)
        return False
    except Exception:
        if fs.exists(path) and fs.exists(tmp):
            _remove_quietly(fs, tmp)
            return False
        raise
    return True


def _remove_quietly(fs: Any, path: str) -> None:
    try:
        fs.rm(path)
    except OSError as err:
        log.debug("could not remove %s: %s", path, err)


def sync_file(f: Any) -> None:
    """fsync a local file opened through fsspec (no-op for other backends)."""
    fileno = getattr(f, "fileno", None)
    if fileno is not None:
        with contextlib.suppress(OSError, ValueError, NotImplementedError):
            os.fsync(fileno())
