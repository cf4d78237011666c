"""A warm spare: a process that has already paid for the interpreter and the imports
(TensorFlow, Horovod), waiting on a spare host to become a rank.

``python -m ringtrain.rank.warm RUN_ID --slot N`` imports the modules, then waits on the
abstract Unix socket ``ringtrain-warm-<uid>-<run id>-<slot>`` (abstract: no file in a shared
directory; per network namespace, so per simulated host). When Horovod's elastic driver starts
a rank on that host, ``ringtrain.rank.entry`` finds the socket (``RINGTRAIN_WARM`` names the
run) and hands over: its argv, environment and working directory, and its stdin, stdout and
stderr as file descriptors (SCM_RIGHTS). The warm process takes them as its own and runs the
rank exactly as the entry would have (``entry.main``), in this process: nothing is forked
after TensorFlow is imported. The entry stays as the rank's stand-in for whoever started it:
it passes on SIGTERM, SIGINT, SIGHUP and SIGUSR1, and ends with the rank's exit status.

Who may hand over: only a peer of the same user (SO_PEERCRED, checked on both ends; a socket
squatted by another user is not used, the rank starts cold). A warm process serves one rank.
It ends, unused, when its parent goes (the launcher's SSH session to it ended) or after
``--idle-timeout``. If the stand-in is killed, so is the rank, as a cold rank would be. The
reaper finds a warm process by ``RINGTRAIN_RUN_ID`` in its environment, as it finds ranks.

``python -m ringtrain.rank.warm RUN_ID --await-slots N --timeout S`` waits until slots 0..N-1
of the run listen on this host (their imports done: a warm process binds its socket after
them), read from ``/proc/net/unix``; exit 0 when they do, 1 when ``S`` seconds pass first. The
launcher runs it before it offers a host back from its cooldown to Horovod's driver, so the
survivors' ring never waits for that host's imports (``launch/elastic/warmspares.py``).

Standard library only at import.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ringtrain.rank import envvars
from ringtrain.rank.warmstand import LEN, MAX_HEADER, MAX_SLOTS, address, peer_uid, recv_exact

DEFAULT_IMPORTS = ("tensorflow", "horovod.tensorflow.keras")


# ---- the warm process ----

def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    with contextlib.suppress(OSError):
        sock.sendall(LEN.pack(len(data)) + data)


def _take(conn: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The stand-in's header and its three descriptors, or None for anything else."""
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    try:
        if len(msg) < 4 or len(fds) != 3:
            raise ValueError("no header, or not three descriptors")
        size = LEN.unpack(msg[:4])[0]
        if size > MAX_HEADER:
            raise ValueError("header too long")
        body = msg[4:]
        if len(body) < size:
            body += recv_exact(conn, size - len(body))
        header = json.loads(body[:size])
        if not _valid(header):
            raise ValueError("bad header")
    except (ValueError, OSError):
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        return None
    return header, list(fds)


def _valid(header: Any) -> bool:
    return (isinstance(header, dict) and isinstance(header.get("argv"), list)
            and bool(header["argv"]) and all(isinstance(a, str) for a in header["argv"])
            and isinstance(header.get("env"), dict)
            and all(isinstance(k, str) and isinstance(v, str)
                    for k, v in header["env"].items())
            and isinstance(header.get("cwd"), str))


def wait_for_rank(run_id: str, slot: int, idle_timeout: float | None
                  ) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
    """Serve ``slot`` until a stand-in hands a rank over; None when the wait ends unused: the
    idle timeout, or the parent gone (the launcher's SSH session to this process ended)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(run_id, slot))
    except OSError:
        return None  # that slot is already warm
    listener.listen(4)
    parent = os.getppid()
    deadline = None if idle_timeout is None else time.monotonic() + idle_timeout
    try:
        while deadline is None or time.monotonic() < deadline:
            ready, _, _ = select.select([listener], [], [], 0.5)
            if os.getppid() != parent:
                return None
            if not ready:
                continue
            conn, _ = listener.accept()
            conn.settimeout(5.0)
            try:
                if peer_uid(conn) == os.getuid() and (taken := _take(conn)) is not None:
                    return conn, *taken
            except OSError:
                pass
            conn.close()
        return None
    finally:
        listener.close()


def become(conn: socket.socket, header: dict[str, Any], fds: list[int],
           run: Callable[[list[str]], None], imports_s: float = 0.0) -> None:
    """Take the stand-in's descriptors, environment and directory, then ``run`` its argv (the
    entry's main); the exit status goes back to the stand-in however the rank ends."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = (
        os.fdopen(0, "r", closefd=False),
        os.fdopen(1, "w", buffering=1, closefd=False),
        os.fdopen(2, "w", buffering=1, closefd=False))
    os.environ.clear()
    os.environ.update(header["env"])
    os.environ[envvars.WARM_TAKEN] = "1"  # the entry in this process runs the rank itself
    with contextlib.suppress(OSError):
        os.chdir(header["cwd"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in extra if p not in sys.path]
    _send(conn, {"pid": os.getpid()})
    conn.settimeout(None)
    sys.stderr.write(f"ringtrain: this rank starts warm on {socket.gethostname()}: its imports "
                     f"were done ahead ({imports_s:.1f} s)\n")
    said: list[int] = []

    def tell(status: int) -> None:
        if not said:
            said.append(status)
            _send(conn, {"exit": status})

    threading.Thread(target=_die_with_stand_in, args=(conn, said), daemon=True).start()
    from ringtrain.rank import cleanup  # noqa: PLC0415 - standard library only

    cleanup.on_exit_status(tell)  # entry's os._exit path
    status = 0
    try:
        run(list(header["argv"]))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        raise
    except BaseException:
        status = 1
        raise
    finally:
        tell(status)


def _die_with_stand_in(conn: socket.socket, said: list[int]) -> None:
    """The stand-in gone before the rank ended: it was killed, and so is the rank."""
    with contextlib.suppress(OSError):
        while conn.recv(4096):
            pass
    if not said:
        os.kill(os.getpid(), signal.SIGKILL)


ACCEPTING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags: a listening socket


def bound_slots(table: str, run_id: str, uid: int) -> set[int]:
    """The warm slots of ``run_id`` (user ``uid``) listening on this host, from the text of
    ``/proc/net/unix`` (an abstract name shows there with ``@`` for its leading NUL; a
    connection a listener accepted shows its name too, without the listening flag). Pure."""
    prefix = f"@ringtrain-warm-{uid}-{run_id}-"
    found = set()
    for line in table.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 8 or not parts[7].startswith(prefix):
            continue
        slot = parts[7][len(prefix):]
        try:
            listening = int(parts[3], 16) & ACCEPTING and parts[5] == "01"
        except ValueError:
            continue
        if listening and slot.isdigit():
            found.add(int(slot))
    return found


def await_slots(run_id: str, slots: int, timeout: float, poll_s: float = 0.1) -> bool:
    """Whether slots 0..``slots``-1 of ``run_id`` are bound on this host within ``timeout``."""
    deadline = time.monotonic() + timeout
    wanted = set(range(slots))
    while True:
        try:
            with open("/proc/net/unix", encoding="ascii", errors="replace") as table:
                bound = bound_slots(table.read(), run_id, os.getuid())
        except OSError:
            return False
        if wanted <= bound:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def _warm_up(imports: list[str]) -> float:
    began = time.monotonic()
    for name in imports:
        with contextlib.suppress(Exception):  # a missing module is paid for by the rank
            importlib.import_module(name)
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_id")
    p.add_argument("--slot", type=int, default=0)
    p.add_argument("--imports", default=",".join(DEFAULT_IMPORTS))
    p.add_argument("--idle-timeout", type=float, default=None)
    p.add_argument("--await-slots", type=int, default=None, metavar="N",
                   help="wait until slots 0..N-1 are warm on this host, then exit 0")
    p.add_argument("--timeout", type=float, default=60.0, help="with --await-slots: at most")
    args = p.parse_args(argv)
    if os.environ.get(envvars.RUN_ID) != args.run_id or not 0 <= args.slot < MAX_SLOTS:
        sys.stderr.write("warm: RINGTRAIN_RUN_ID must name the run, and --slot be < 16\n")
        return 2
    if args.await_slots is not None:
        slots = min(max(args.await_slots, 0), MAX_SLOTS)
        return 0 if await_slots(args.run_id, slots, args.timeout) else 1
    took = _warm_up([m for m in args.imports.split(",") if m])
    sys.stderr.write(f"warm: slot {args.slot} ready after {took:.1f} s of imports\n")
    found = wait_for_rank(args.run_id, args.slot, args.idle_timeout)
    if found is None:
        return 0
    from ringtrain.rank import entry  # noqa: PLC0415 - standard library only

    become(*found, run=entry.main, imports_s=took)
    return 0


if __name__ == "__main__":
    sys.exit(main())
