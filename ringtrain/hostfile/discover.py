"""Run a host discovery script: the one place that executes a user's inventory program.

The script is run directly (argv list, never a shell), with no stdin, in its own process group
and under a timeout; on timeout the whole group is killed.

What runs is the file the caller opened and judged (``trust.open_file``), never its path
again: the descriptor goes to the child (``pass_fds``, same number) and the child executes
``/proc/self/fd/N``, which names that open file whatever its path names now; a ``#!``
interpreter opens the same name, so reads the same file. (Copying the checked bytes to a
private file would run them too, but from a folder that may be mounted noexec, and leave a
file to clean up; the descriptor needs neither.) So the script's ``$0`` is
``/proc/self/fd/N``: a script that reads files beside it names them by an absolute path.

It must print ``host[:slots]`` lines (horovodrun's ``--host-discovery-script`` format) and
exit 0; anything else is an InventoryError that names the script and shows the tail of its
stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import time

from ringtrain.errors import InventoryError

log = logging.getLogger(__name__)

MAX_OUTPUT = 1 << 20
_TAIL = 400


def run_discovery_script(path: str, fd: int, *, timeout: float = 30.0) -> str:
    """Run the executable open as ``fd`` (``path``'s, as judged); return its stdout (UTF-8
    text)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [f"/proc/self/fd/{fd}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(fd,),
        )
    except OSError as err:
        raise InventoryError(
            f"cannot run discovery script: {err.strerror or err}",
            "make it executable with a '#!' line (chmod +x), or pass --hosts-format for a "
            "plain host file",
            source=path,
        ) from None
    try:
        out, err_bytes = _read_bounded(proc, started + timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise InventoryError(
            f"discovery script did not finish within {timeout:g} s",
            "make the script faster or pass a larger --discovery-timeout",
            source=path,
        ) from None
    except OverflowError:
        _kill_group(proc)
        raise InventoryError(
            f"discovery script printed more than {MAX_OUTPUT} bytes; it was stopped there",
            "print one host:slots line per host",
            source=path,
        ) from None
    log.debug("discovery script %s: rc=%s in %.2f s", path, proc.returncode,
              time.monotonic() - started)
    return _check_result(path, proc.returncode, out, err_bytes)


def _read_bounded(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes]:
    """stdout and stderr until both close, keeping at most MAX_OUTPUT (+ the last stderr)
    in memory: a script that prints without end is stopped at the limit, not buffered whole.
    OverflowError past the limit, TimeoutExpired past the deadline."""
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = streams[key.fd]
                buf += chunk
                if key.fd == proc.stdout.fileno() and len(buf) > MAX_OUTPUT:
                    raise OverflowError
                if key.fd == proc.stderr.fileno() and len(buf) > 4 * _TAIL:
                    del buf[: len(buf) - 2 * _TAIL]  # only its tail is ever shown
    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    return bytes(streams[proc.stdout.fileno()]), bytes(streams[proc.stderr.fileno()])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("discovery script %d: pipes still open after SIGKILL", proc.pid)


def _check_result(path: str, returncode: int, out: bytes, err: bytes) -> str:
    tail = err.decode("utf-8", "replace").strip()[-_TAIL:]
    if returncode != 0:
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited {returncode}"
        raise InventoryError(
            f"discovery script {how}" + (f": {tail}" if tail else " (no stderr)"),
            "run the script by hand to see why; it must print host:slots lines and exit 0",
            source=path,
        )
    if len(out) > MAX_OUTPUT:
        raise InventoryError(
            f"discovery script printed {len(out)} bytes, more than {MAX_OUTPUT}",
            "print one host:slots line per host",
            source=path,
        )
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as decode_err:
        line = out[: decode_err.start].count(b"\n") + 1
        raise InventoryError(
            "discovery script output is not UTF-8 text",
            "print plain host:slots lines",
            source=f"{path} (output)",
            line=line,
        ) from None
