"""Per-rank entry point: ``python -m ringtrain.rank.entry [--mpi] SCRIPT ARGS...``, or
``... -m MODULE ARGS...`` (a module, run as ``python -m`` runs it), or ``... --exec PROGRAM
ARGS...`` (any other program: a wrapper script, a binary; see ``run_program``).

What each rank does before and after the training script:

* horovodrun's ssh shim folder, which horovodrun's PATH carries to every rank, leaves PATH
  (``RINGTRAIN_LAUNCHER_BIN``): it is the launcher's, not this host's.
* stdout/stderr pass whole lines only (``lines.LineStream``). Open MPI's ``--tag-output`` tags
  each chunk a rank writes, so unbuffered output (``print`` writes the text and the newline
  separately) and progress bars (backspaces, carriage returns) tore lines apart; now each line
  is one write, and a progress bar's final state is one line.
* under mpirun and horovodrun, it first reads the secrets file ``RINGTRAIN_ENV_FILE`` names into
  its environment (``secretfile``): the control token, ``--env`` secrets, AWS keys. A file that
  is missing, a link, not the user's or not 0600 ends the rank with the reason.
* it checks in with a supervising launcher (``ringtrain.rank.agent``), when there is one, and
  sets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (``worldenv``).
* when the script returns (or exits with status 0) it tells the launcher "done" before the
  interpreter finalises, so a slow exit is never mistaken for a dead host. A thread still
  freeing ``fit``'s iterator then (TensorFlow's autotune wait, up to 60 s; ``iterators``) is
  not waited for: the rank does what finalisation would do for the script (``quickexit``:
  its threads joined, its ``atexit`` handlers, MPI, its open files closed) and ends.
* under Horovod's elastic driver, a script using ``ringtrain.keras`` that fails only because
  the ring must be formed again (a rank lost, hosts added) runs again from the top in this
  process (``rerun``, ``ringtrain.keras.memory``): survivors keep their imports.
* an uncaught exception (or ``sys.exit`` with a non-zero status) prints the traceback (a
  ringtrain error: ``ringtrain: error:`` and its fix, no traceback) and ends
  the process at once with ``os._exit``: no atexit handlers. Under MPI, waiting for them is what
  hangs a job: ``hvd.shutdown()`` at exit tries to coordinate with ranks that are blocked in an
  all-reduce, and mpi4py's runner only calls ``MPI_Abort`` after that. mpirun (and horovodrun)
  end the whole job as soon as one rank exits non-zero. ``--mpi`` is accepted for clarity of
  the command line; the behaviour is the same under Gloo.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import traceback
from types import FrameType
from typing import IO, TextIO

from ringtrain.rank import cleanup, envvars, iterators, quickexit, relay, rerun, secretfile
from ringtrain.rank.events import ERROR_MARK
from ringtrain.rank.lines import LineStream

SETTLE_S = 1.0  # how long a done rank waits for iterators freed beside it (iterators.settle)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            if isinstance(stream, LineStream):
                stream.drain()
            else:
                stream.flush()


def _exit_now(status: int) -> None:
    cleanup.run_all()  # os._exit skips atexit: staging directories and the like
    _flush()
    cleanup.tell_exit_status(status)  # a warm process's stand-in (warm)
    os._exit(status)


def _done() -> None:
    """Tell the launcher the script returned, before the interpreter finalises TensorFlow and
    Horovod: that can take more than the heartbeat timeout on a loaded host, during which the
    agent's threads may not run. A rank that said "done" is never taken for a lost host."""
    from ringtrain.rank import agent  # noqa: PLC0415 - standard library only

    current = agent.agent()
    if current is not None:
        current.done()


def run_script(args: list[str], *, module: bool = False) -> None:
    """Run a Python file (``module``: a module, as ``python -m`` does) in this process; again,
    from the top, when an elastic reset asks for it (``rerun``)."""
    rerun.enable()
    while not _run_once(args, module=module):
        iterators.let_go()  # the failed run's traceback is gone: its iterators go beside this one
    _finish()


def _finish() -> None:
    """What must end before the script counts as done (the last checkpoint upload), then
    "done" to the launcher; a failure there fails the rank, with its words."""
    try:
        cleanup.run_before_done()
    except BaseException as exc:  # reported like the script's own failure
        _report(exc)
        _exit_now(1)
    _done()
    if not iterators.settle(SETTLE_S):
        _exit_beside_a_free()


def _exit_beside_a_free() -> None:
    """A thread still frees a tf.data iterator, waiting out TensorFlow's autotune period (up
    to 60 s; ``iterators``), and the script is done and said so: what finalisation would do
    for the script (``quickexit``: threads, atexit, MPI, open files), then status 0, without
    finalising TensorFlow beneath that thread."""
    atexit.unregister(iterators.settle)  # that is the wait this exit skips
    quickexit.finalise_like_python()
    _exit_now(0)


def _run_once(args: list[str], *, module: bool) -> bool:
    """One run of the script: True when it returned, False when it is to run again."""
    if module:
        sys.argv[:] = ["-m", *args[1:]]  # runpy puts the module's path in argv[0]
        sys.path[0] = os.getcwd()
    else:
        sys.argv[:] = list(args)
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    try:
        if module:
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            _finish()
            raise
        if not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
            code = 1
        _exit_now(code)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt) and rerun.wanted(exc):
            iterators.set_aside(exc)  # freed beside the next run, not on the way to it
            return False
        _report(exc)
        _exit_now(1)
    return True


def _report(exc: BaseException) -> None:
    if _is_ringtrain_error(exc):  # a mistake ringtrain names (ringtrain.keras): no traceback
        hint = getattr(exc, "hint", "")
        sys.stderr.write(f"{ERROR_MARK} {exc}\n" + (f"  fix: {hint}\n" if hint else ""))
    else:
        traceback.print_exception(exc)


def _is_ringtrain_error(exc: BaseException) -> bool:
    """One of ringtrain.errors' (this module imports only ringtrain.rank: told by its class)."""
    return any(c.__name__ == "RingtrainError" and c.__module__ == "ringtrain.errors"
               for c in type(exc).__mro__)


def run_program(args: list[str]) -> None:
    """Run any program as this rank's child and end as it ends (its exit status, or 128+N
    when signal N killed it). This process stays the rank for the launcher: it checks in,
    heartbeats and forwards what the child reports (``relay``); SIGTERM, SIGINT and SIGHUP
    reach the child. The launcher's address and token are not in the child's environment (nor
    the path of the secrets file the token came from, under Gloo)."""
    read_fd, write_fd = os.pipe()
    env = {k: v for k, v in os.environ.items()
           if k not in (envvars.CONTROL_ADDR, envvars.CONTROL_TOKEN, envvars.ENV_FILE)}
    env[envvars.RELAY_FD] = str(write_fd)
    _flush()
    try:
        child = subprocess.Popen(args, env=env, pass_fds=(write_fd,),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as err:
        sys.stderr.write(f"ringtrain: cannot run {args[0]!r}: {err}\n")
        _exit_now(127)
    os.close(write_fd)
    from ringtrain.rank import agent as rankagent  # noqa: PLC0415 - standard library only

    line = rankagent.agent()
    if line is not None:
        relay.forward(read_fd, line.send)
    else:
        os.close(read_fd)

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    # the child's output goes through this process's whole-line streams, like a script's
    assert child.stdout is not None and child.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(src, dst), daemon=True)
             for src, dst in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
    for pump in pumps:
        pump.start()
    status = child.wait()
    for pump in pumps:
        pump.join(timeout=5)  # a grandchild may hold the pipe open: do not wait for it
    if status == 0:
        _done()
        _flush()
        sys.exit(0)
    _exit_now(128 - status if status < 0 else status)


def _pump(src: IO[bytes], dst: TextIO) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(src.fileno(), 65536):
            dst.write(decoder.decode(chunk))
        dst.write(decoder.decode(b"", final=True))


def _off_path() -> None:
    """horovodrun's ssh shim folder (``RINGTRAIN_LAUNCHER_BIN``) off PATH: it is the
    launcher's, reached through its descriptor; on a rank's host the same name points to
    another process's, which the script must never run a program from."""
    folder = os.environ.pop(envvars.LAUNCHER_BIN, None)
    if folder:
        parts = os.environ.get("PATH", "").split(os.pathsep)
        os.environ["PATH"] = os.pathsep.join(p for p in parts if p != folder)


def main(argv: list[str]) -> None:
    _off_path()
    warm_run = os.environ.get(envvars.WARM)
    if warm_run and not os.environ.get(envvars.WARM_TAKEN):
        from ringtrain.rank import warmstand  # noqa: PLC0415 - standard library only

        status = warmstand.handoff(warm_run, argv)
        if status is not None:  # a warm process on this host ran the rank
            os._exit(status)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)
    # whole lines only: progress bars (Keras verbose=1, tqdm) become log lines (lines.py)
    sys.stdout = LineStream(sys.stdout)
    sys.stderr = LineStream(sys.stderr)
    atexit.register(_flush)  # a last partial line, at a normal exit
    try:
        secretfile.apply()  # mpirun, horovodrun: the secrets (the agent's token too) by file
    except secretfile.SecretFileError as err:
        sys.stderr.write(f"ringtrain: cannot take the secrets from their file on "
                         f"{socket.gethostname()}: {err}\n")
        _exit_now(2)
    from ringtrain.rank import agent as rankagent  # noqa: PLC0415 - standard library only

    rankagent.start_from_env()  # check in with a supervising launcher, if there is one
    from ringtrain.rank import tfconfig, worldenv  # noqa: PLC0415 - standard library only

    worldenv.apply()  # RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, as torchrun sets them
    try:
        tfconfig.apply()  # --strategy tf-*: this task's TF_CONFIG
    except tfconfig.TfConfigError as err:
        sys.stderr.write(f"ringtrain: {err}\n")
        _exit_now(2)
    args = argv[1:] if argv[:1] == ["--mpi"] else argv
    kind = args[0] if args[:1] in (["-m"], ["--exec"]) else None
    if kind is not None:
        args = args[1:]
    if not args:
        sys.exit("usage: python -m ringtrain.rank.entry [--mpi] [-m MODULE | --exec PROGRAM | "
                 "SCRIPT] [ARGS...]")
    if kind == "--exec":
        run_program(args)
    else:
        run_script(args, module=kind == "-m")


if __name__ == "__main__":
    main(sys.argv[1:])
