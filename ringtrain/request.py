"""LaunchRequest: what the user asked for. Built only by ``ringtrain.cli``, the one argv parser."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path

from ringtrain.errors import UsageError
from ringtrain.hostfile.allocate import AllocationPolicy


class Backend(enum.Enum):
    """How ranks are started. Values are the names used on the command line."""

    MPIRUN = "mpirun"
    HOROVODRUN = "horovodrun"
    SRUN = "srun"


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """``--env NAME`` (forward the launcher's value) or ``--env NAME=VALUE`` (set it)."""

    name: str
    value: str | None = None

    @classmethod
    def parse(cls, text: str) -> EnvSpec:
        name, sep, value = text.partition("=")
        if not _ENV_NAME_RE.match(name):
            raise UsageError(
                f"--env {text!r}: {name!r} is not a valid environment variable name",
                "use --env NAME to forward a variable or --env NAME=VALUE to set one",
            )
        return cls(name=name, value=value if sep else None)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Everything ``ringtrain launch`` was asked, already validated for form (not feasibility)."""

    script: str
    script_args: tuple[str, ...] = ()
    hosts_file: str | None = None
    host_spec: str | None = None
    hosts_format: str | None = None
    np: int | None = None
    backend: Backend = Backend.MPIRUN
    gloo: bool = False
    env: tuple[EnvSpec, ...] = ()
    runs_dir: Path = Path("runs")
    working_dir: Path = Path(".")
    ssh_config: Path | None = None
    known_hosts: Path | None = None  # mpirun's ssh verifies keys against it too
    # --include/--exclude/--slots/--min-hosts/--ring-label
    allocation: AllocationPolicy = field(default_factory=AllocationPolicy)
    network_interface: str | None = None
    dry_run: bool = False
    python: str | None = None
    probe: bool = True
    checkpoint_url: str | None = None

    def __post_init__(self) -> None:
        if self.hosts_file and self.host_spec:
            raise UsageError(
                "--hosts and -H both given", "pass either an inventory with --hosts or -H h1:N,..."
            )
        if self.np is not None and self.np < 1:
            raise UsageError(f"-np {self.np}: need at least one rank", "pass -np 1 or more")
        if self.checkpoint_url is not None:
            _check_checkpoint_url(self.checkpoint_url)
        if self.gloo and self.backend is not Backend.HOROVODRUN:
            raise UsageError(
                "--gloo needs the horovodrun backend (mpirun always uses MPI)",
                "add --backend horovodrun, or drop --gloo",
            )


_URL_RE = re.compile(r"^(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?(?P<rest>.*)$")


def _check_checkpoint_url(url: str) -> None:
    m = _URL_RE.match(url)
    scheme = m.group("scheme") if m else None
    if scheme not in (None, "file", "s3", "hdfs", "viewfs"):
        raise UsageError(
            f"--checkpoint {url!r}: unsupported scheme {scheme!r}",
            "use a local path, file://, s3://bucket/prefix or hdfs://namenode/path",
        )
    authority = (m.group("rest") if m else url).split("/", 1)[0]
    if scheme and "@" in authority:
        raise UsageError(
            "--checkpoint URL contains credentials, which would show in argv, logs and ps",
            "remove user:secret@ from the URL and pass credentials through AWS_* variables "
            "or ~/.aws/credentials",
        )
