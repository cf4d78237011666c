"""Entry points: a host source (file, discovery script or -H spec) -> Inventory.

The only I/O in ``ringtrain.hostfile``: reading the source file, and running a discovery script
through ``ringtrain.hostfile.discover`` (the one module allowed to execute it). The file is
opened once (``trust.open_file``): whether it is a script, whether it is trusted, and what is
read or run are all that one open file.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ringtrain import trust
from ringtrain.errors import InventoryError, UsageError
from ringtrain.hostfile.discover import run_discovery_script
from ringtrain.hostfile.model import Inventory
from ringtrain.hostfile.nodeset import is_host_list
from ringtrain.hostfile.openmpi import OPENMPI_KEYS
from ringtrain.hostfile.parse import (
    parse_host_spec,
    parse_mpich_machinefile,
    parse_nodelist,
    parse_openmpi_hostfile,
    parse_pbs_nodefile,
)
from ringtrain.hostfile.structured import parse_toml_inventory, parse_yaml_inventory

log = logging.getLogger(__name__)

FORMATS = ("openmpi", "mpich", "horovod", "yaml", "toml", "nodelist", "pbs", "script")
MAX_FILE_BYTES = 8 << 20
_EXTENSIONS = {".yaml": "yaml", ".yml": "yaml", ".json": "yaml", ".toml": "toml"}
_PARSERS: dict[str, Callable[[str, str], Inventory]] = {
    "openmpi": parse_openmpi_hostfile,
    "mpich": parse_mpich_machinefile,
    "horovod": lambda text, source: parse_host_spec(text.strip(), source),
    "yaml": parse_yaml_inventory,
    "toml": parse_toml_inventory,
    "nodelist": parse_nodelist,
    "pbs": parse_pbs_nodefile,
}
_MPICH_LINE_RE = re.compile(r"^(?:\[[^\]\s]+\]|[^:\s\[\]]+):\d+$")
_YAML_RE = re.compile(r"^(?:---|\{|(?:defaults|groups|hosts)\s*:)")
_LIST_WORD_RE = re.compile(r"[\w.%:\[\],-]+", re.ASCII)
_TOML_RE = re.compile(r"^(?:\[\[?\s*(?:defaults|groups|hosts)\b|(?:defaults|groups|hosts)\s*=)")


def load_inventory(
    source: str, fmt: str | None = None, *, discovery_timeout: float = 30.0
) -> Inventory:
    """Read ``source`` (a file path) as ``fmt``, or as the format its name and content show.

    An executable file that starts with ``#!`` (or ``fmt='script'``) is run as a discovery
    script printing ``host[:slots]`` lines.
    """
    if fmt is not None and fmt not in FORMATS:
        raise InventoryError(
            f"unknown host file format {fmt!r}", f"use one of: {', '.join(FORMATS)}", source=source
        )
    path = Path(source)
    try:
        fd, owner = trust.open_file(path)  # one file, judged and read (or run) as opened
    except OSError as err:
        what = ("is a directory" if path.is_dir() else "does not exist"
                if err.errno in (errno.ENOENT, errno.ENOTDIR) else
                f"cannot be read: {err.strerror or err}")
        raise InventoryError(
            f"host file {what}",
            "pass the path of a host file, or list hosts inline with -H gpu01:4,gpu02:4",
            source=source,
        ) from None
    try:
        if fmt == "script" or (fmt is None and _is_script(fd, path)):
            _refuse_untrusted_script(owner, path, source)
            output = run_discovery_script(source, fd, timeout=discovery_timeout)
            return parse_mpich_machinefile(output, f"{source} (output)", fmt="script")
        text = _read_text(fd, source)
    finally:
        os.close(fd)
    chosen = fmt or detect_format(source, text)
    log.info("%s: reading as %s", source, chosen)
    return parse_inventory_text(text, chosen, source)


def parse_inventory_text(text: str, fmt: str, source: str) -> Inventory:
    """Parse ``text`` in a text format (every FORMATS entry but 'script')."""
    parser = _PARSERS.get(fmt)
    if parser is None:
        raise InventoryError(
            f"cannot parse text as {fmt!r}", f"use one of: {', '.join(_PARSERS)}", source=source
        )
    with _gc_paused():
        return parser(text, source)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """A parse allocates a few objects per host and frees none of them until it ends, so the
    cyclic collector's passes over them find nothing: at 10,000 YAML hosts they were 0.6 of
    the 1.1 s (``python -m ringtrain.bench.launcher.plan_scale``). It runs again when the parse
    ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_HOST_LIST_RE = re.compile(r"[A-Za-z0-9_.\-\[\]]+(?::\d+)?(?:,[A-Za-z0-9_.\-\[\]]+(?::\d+)?)*")


@dataclass(frozen=True, slots=True)
class Spelling:
    """How the caller names the host options in its errors: the command line's flags
    (``CLI``), or ``ringtrain.run()``'s keyword arguments (``PYTHON``)."""

    host_spec: str
    hosts_file: str
    hosts_format: str
    keywords: bool = False

    def given(self, option: str, value: str) -> str:
        """``-H gpu.txt`` on the command line, ``hosts='gpu.txt'`` from Python."""
        return f"{option}{value!r}" if self.keywords else f"{option} {value}"


CLI = Spelling("-H", "--hosts", "--hosts-format")
PYTHON = Spelling("hosts=", "hostfile=", "hosts_format=", keywords=True)


def check_host_source(hosts_file: str | None, host_spec: str | None, fmt: str | None,
                      spelling: Spelling = CLI) -> None:
    """Refuse what names the hosts twice or in the wrong place, in the caller's words:
    ``-H hostfile`` (DeepSpeed's ``-H``) where the file exists, and a ``--hosts-format``
    that an inline host list cannot have."""
    s, inline = spelling, "gpu01:4,gpu02:4"
    if hosts_file is not None and host_spec is not None:
        raise UsageError(f"{s.hosts_file} and {s.host_spec} both name hosts",
                         f"pass either {s.given(s.hosts_file, 'FILE')} or "
                         f"{s.given(s.host_spec, inline)}")
    if host_spec is not None and not any(c in host_spec for c in ":,") and (
            Path(host_spec).is_file()):
        raise UsageError(
            f"{s.given(s.host_spec, host_spec)}: {s.host_spec} takes hosts inline "
            f"({repr(inline) if s.keywords else inline}), and {host_spec} is a file",
            f"pass {s.given(s.hosts_file, host_spec)}" + (
                "" if s.keywords else " (DeepSpeed's -H/--hostfile is ringtrain's --hosts; "
                "--hostfile works too)"))
    if host_spec is not None and fmt not in (None, "horovod", "nodelist"):
        raise UsageError(
            f"{s.host_spec} takes host:slots lists, not "
            f"{s.given(s.hosts_format, fmt)}",
            f"drop {s.hosts_format}, or put the hosts in a file and pass "
            f"{s.given(s.hosts_file, 'FILE')}",
        )


def resolve_hosts(
    hosts_file: str | None,
    host_spec: str | None,
    fmt: str | None = None,
    *,
    discovery_timeout: float = 30.0,
    note: Callable[[str], None] = lambda _text: None,
) -> Inventory | None:
    """What ``--hosts FILE`` / ``-H SPEC`` name; None when neither is given.

    Habits from other launchers, each said in a ``note``: ``--hosts a:2,b:2`` (horovodrun's
    long ``-H``) with no such file is that host list; ``-H hostfile`` (DeepSpeed's ``-H``) where
    the file exists is refused with the flag to use (``check_host_source``)."""
    check_host_source(hosts_file, host_spec, fmt)
    if hosts_file is not None and _HOST_LIST_RE.fullmatch(hosts_file) and (
            ":" in hosts_file or "," in hosts_file) and not Path(hosts_file).exists():
        note(f"--hosts {hosts_file}: no such file; taken as a host list, as horovodrun's "
             "--hosts (-H) takes it")
        hosts_file, host_spec = None, hosts_file
        check_host_source(hosts_file, host_spec, fmt)
    if host_spec is not None:
        return parse_nodelist(host_spec, "-H") if fmt == "nodelist" else parse_host_spec(host_spec)
    if hosts_file is not None:
        return load_inventory(hosts_file, fmt, discovery_timeout=discovery_timeout)
    return None


def detect_format(source: str, text: str) -> str:
    """The format ``text`` is written in, from the file extension, else from its content."""
    by_ext = _EXTENSIONS.get(Path(source).suffix.lower())
    if by_ext is not None:
        return by_ext
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    rules: tuple[tuple[str, Callable[[str], bool]], ...] = (
        ("yaml", lambda line: _YAML_RE.match(line) is not None),
        ("toml", lambda line: _TOML_RE.match(line) is not None),
        # 'host slots=N'; the Open MPI parser explains any other extra words
        ("openmpi", lambda line: len(line.split()) > 1 and not _is_name_list(line)),
        # 'gpu[01-04] gpu[05-08]': host lists may be separated by spaces too
        ("nodelist", lambda line: any(is_host_list(word) for word in line.split())),
        ("nodelist", lambda line: len(line.split()) > 1),  # 'gpu01 gpu02': names, no keys
        ("horovod" if len(lines) == 1 else "nodelist", lambda line: "," in line),
        ("mpich", lambda line: _MPICH_LINE_RE.match(line) is not None),
    )
    for fmt, matches in rules:
        if any(matches(line) for line in lines):
            return fmt
    return "pbs" if len(set(lines)) < len(lines) else "openmpi"


def _is_name_list(line: str) -> bool:
    """Several host names or host lists separated by spaces, not an Open MPI ``host key=N``
    line: no '=', no bare number or Open MPI key (``gpu01 4``, ``gpu01 slots``) among them."""
    words = line.split()
    return "=" not in line and all(
        _LIST_WORD_RE.fullmatch(word) and not word.isdigit() and word not in OPENMPI_KEYS
        for word in words
    )


def _is_script(fd: int, path: Path) -> bool:
    """The open file is a program this user may run: executable (asked of the file opened,
    through /proc/self/fd) and starting with ``#!`` or an ELF header."""
    if not os.access(f"/proc/self/fd/{fd}", os.X_OK):
        return False
    magic = os.pread(fd, 4, 0)
    if magic.startswith(b"#!") or magic == b"\x7fELF":
        return True
    log.warning("%s is executable but has no '#!' line: reading it as a host file", path)
    return False


def _refuse_untrusted_script(owner: trust.Owner, path: Path, source: str) -> None:
    """A discovery script another user can change would run their commands as you: judged
    on the file opened, which is the file run."""
    uid = os.geteuid()
    reason = trust.untrusted_file(owner, uid)
    if reason is not None:
        raise InventoryError(
            f"refusing to run the discovery script: {reason}", trust.fix_for(path, uid),
            source=source,
        )


def _read_text(fd: int, source: str) -> str:
    try:
        data = trust.read_open(fd, MAX_FILE_BYTES)
    except OSError as err:
        if err.errno == errno.EFBIG:
            raise InventoryError(
                f"host file is more than {MAX_FILE_BYTES} bytes",
                "pass a host file, not a data file",
                source=source,
            ) from None
        raise InventoryError(
            f"cannot read host file: {err.strerror or err}", "check the path and its permissions",
            source=source,
        ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InventoryError(
            "host file is not UTF-8 text (is it a binary file?)",
            "save the file as UTF-8 text",
            source=source, line=line, column=column,
        ) from None
