"""Per-rank entry point: ``python -m ringtrain.rank.entry [--mpi] SCRIPT ARGS...``.

What each rank does before and after the training script:

* stdout/stderr become line-buffered. Open MPI's ``--tag-output`` tags each chunk a rank writes,
  so unbuffered output (``print`` writes the text and the newline separately) tears lines apart;
  line buffering makes one write per line.
* it checks in with a supervising launcher (``ringtrain.rank.agent``), when there is one.
* an uncaught exception (or ``sys.exit`` with a non-zero status) prints the traceback and ends
  the process at once with ``os._exit``: no atexit handlers. Under MPI, waiting for them is what
  hangs a job: ``hvd.shutdown()`` at exit tries to coordinate with ranks that are blocked in an
  all-reduce, and mpi4py's runner only calls ``MPI_Abort`` after that. mpirun (and horovodrun)
  end the whole job as soon as one rank exits non-zero. ``--mpi`` is accepted for clarity of
  the command line; the behaviour is the same under Gloo.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _exit_now(status: int) -> None:
    _flush()
    os._exit(status)


def run_script(args: list[str]) -> None:
    sys.argv[:] = args
    sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    try:
        runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            raise
        if not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
            code = 1
        _exit_now(code)
    except BaseException:
        traceback.print_exc()
        _exit_now(1)


def main(argv: list[str]) -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)
    from ringtrain.rank import agent as rankagent  # noqa: PLC0415 - standard library only

    rankagent.start_from_env()  # check in with a supervising launcher, if there is one
    args = argv[1:] if argv[:1] == ["--mpi"] else argv
    if not args:
        sys.exit("usage: python -m ringtrain.rank.entry [--mpi] SCRIPT [ARGS...]")
    run_script(args)


if __name__ == "__main__":
    main(sys.argv[1:])
