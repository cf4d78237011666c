"""Where checkpoints live: one type, one parser, one default, one layout. PURE.

``Location.parse`` is the only reader of a checkpoint URL, for ``--checkpoint``,
``ringtrain.run(checkpoint=...)``, the ranks' ``RINGTRAIN_CHECKPOINT_URL``, ``ckpt ls`` and
``ckpt verify``:

* ``/dir``, ``dir`` (against the working directory), ``file:///dir``  -> the local file system
* ``s3://bucket[/prefix]``                                          -> S3
* ``hdfs://namenode[:port]/dir``, ``viewfs://cluster/dir``          -> HDFS (hdfs-native)

Credentials in a URL are refused (they would show in argv, logs and ps). ``default(run_dir)``
is the one default (``runs/<id>/checkpoints``), and the layout below a location (manifests
beside data) is spelt here and nowhere else.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ringtrain.errors import CheckpointError

SUPPORTED = ("file", "s3", "hdfs", "viewfs")
DEFAULT_DIR = "checkpoints"  # below a run directory, when no --checkpoint is given
MANIFEST_DIR = "manifests"  # below a location: one manifest per committed checkpoint
DATA_DIR = "data"  # below a location: each commit attempt's files


@dataclass(frozen=True, slots=True)
class Location:
    protocol: str  # one of SUPPORTED
    root: str  # path as the filesystem wants it: /abs/dir, bucket/prefix, /hdfs/dir
    host: str | None = None  # namenode for hdfs/viewfs
    port: int | None = None

    def __post_init__(self) -> None:  # a Location read back from plan.json is checked too
        if self.protocol not in SUPPORTED or not isinstance(self.root, str) or (
                self.host is not None and (not isinstance(self.host, str) or "@" in self.host
                                           or "/" in self.host)) or (
                self.port is not None and (not isinstance(self.port, int) or
                                           not 0 < self.port < 65536)):
            raise CheckpointError(
                f"checkpoint location {self.protocol}://{self.host or ''}{self.root} is not "
                "one ringtrain writes (unknown scheme, credentials or a bad host or port)",
                "give a path, file:///dir, s3://bucket/prefix or hdfs://namenode:8020/dir",
            )

    @classmethod
    def parse(cls, text: str, working_dir: Path | None = None) -> Location:
        """Validate a checkpoint URL or path; a relative path is taken against
        ``working_dir`` (default: the current directory)."""
        if not text.strip():
            raise CheckpointError(
                "the checkpoint location is empty",
                "give a path, file:///dir, s3://bucket/prefix or hdfs://namenode:8020/dir",
            )
        parsed = urllib.parse.urlsplit(text)
        scheme = parsed.scheme or "file"
        if scheme not in SUPPORTED:
            raise CheckpointError(
                f"checkpoint URL {text!r}: unsupported scheme {scheme!r}",
                "use a local path, file:///dir, s3://bucket/prefix or hdfs://namenode:8020/dir",
            )
        if "@" in parsed.netloc:
            raise CheckpointError(
                "checkpoint URL contains credentials, which would leak into argv, logs and ps",
                "remove user:secret@ and use AWS_* variables, ~/.aws/credentials or Kerberos",
            )
        if scheme == "file":
            if parsed.scheme and parsed.netloc not in ("", "localhost"):
                raise CheckpointError(
                    f"checkpoint URL {text!r}: file:// takes no host",
                    "write file:///absolute/path (three slashes)",
                )
            path = Path(os.path.expanduser(parsed.path if parsed.scheme else text))
            base = working_dir if working_dir is not None else Path.cwd()
            root = os.path.normpath(path if path.is_absolute() else base / path)
            return cls("file", "/" + root.lstrip("/"))  # //scratch (a $VAR/ path) is /scratch
        if not text.startswith(f"{scheme}://"):
            raise CheckpointError(
                f"checkpoint URL {text!r}: {scheme}: needs two slashes",
                f"write {scheme}://{'bucket/prefix' if scheme == 's3' else 'namenode:8020/dir'}",
            )
        if scheme == "s3":
            bucket, key = parsed.netloc, parsed.path.strip("/")
            if not bucket:
                raise CheckpointError(f"checkpoint URL {text!r} names no bucket",
                                      "use s3://bucket/dir")
            return cls("s3", f"{bucket}/{key}" if key else bucket)
        try:
            port = parsed.port
        except ValueError:
            raise CheckpointError(f"checkpoint URL {text!r}: the port is not a number",
                                  f"write {scheme}://namenode:8020/dir") from None
        return cls(scheme, "/" + parsed.path.strip("/"), parsed.hostname, port)

    @classmethod
    def default(cls, run_dir: Path) -> Location:
        """Where a run's checkpoints go when no --checkpoint was given."""
        return cls("file", str(run_dir.absolute() / DEFAULT_DIR))

    @property
    def url(self) -> str:
        if self.protocol == "file":
            return f"file://{self.root}"
        if self.protocol == "s3":
            return f"s3://{self.root}"
        netloc = f"{self.host or ''}{f':{self.port}' if self.port else ''}"
        return f"{self.protocol}://{netloc}{self.root}"

    @property
    def text(self) -> str:
        """As a user writes it: a plain path for local storage, else the URL. What the ranks
        get in RINGTRAIN_CHECKPOINT_URL and what reports show."""
        return self.root if self.protocol == "file" else self.url

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def manifests(self) -> str:
        """The directory of manifests, as the filesystem names it."""
        return f"{self.root.rstrip('/')}/{MANIFEST_DIR}"

    def __str__(self) -> str:
        return self.text


def parse_url(text: str) -> Location:
    """``Location.parse`` against the current directory (for fsspec callers)."""
    return Location.parse(text)
