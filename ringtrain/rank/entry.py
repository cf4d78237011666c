"""Per-rank entry point: ``python -m ringtrain.rank.entry [--mpi] SCRIPT ARGS...``.

What each rank does before and after the training script:

* stdout/stderr pass whole lines only (``lines.LineStream``). Open MPI's ``--tag-output`` tags
  each chunk a rank writes, so unbuffered output (``print`` writes the text and the newline
  separately) and progress bars (backspaces, carriage returns) tore lines apart; now each line
  is one write, and a progress bar's final state is one line.
* it checks in with a supervising launcher (``ringtrain.rank.agent``), when there is one.
* when the script returns (or exits with status 0) it tells the launcher "done" before the
  interpreter finalises, so a slow exit is never mistaken for a dead host.
* an uncaught exception (or ``sys.exit`` with a non-zero status) prints the traceback and ends
  the process at once with ``os._exit``: no atexit handlers. Under MPI, waiting for them is what
  hangs a job: ``hvd.shutdown()`` at exit tries to coordinate with ranks that are blocked in an
  all-reduce, and mpi4py's runner only calls ``MPI_Abort`` after that. mpirun (and horovodrun)
  end the whole job as soon as one rank exits non-zero. ``--mpi`` is accepted for clarity of
  the command line; the behaviour is the same under Gloo.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import sys
import traceback

from ringtrain.rank import cleanup
from ringtrain.rank.lines import LineStream


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
    os._exit(status)


def _done() -> None:
    """Tell the launcher the script returned, before the interpreter finalises TensorFlow and
    Horovod: that can take more than the heartbeat timeout on a loaded host, during which the
    agent's threads may not run. A rank that said "done" is never taken for a lost host."""
    from ringtrain.rank import agent  # noqa: PLC0415 - standard library only

    current = agent.agent()
    if current is not None:
        current.done()


def run_script(args: list[str]) -> None:
    sys.argv[:] = args
    sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    try:
        runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            _done()
            raise
        if not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
            code = 1
        _exit_now(code)
    except BaseException:
        traceback.print_exc()
        _exit_now(1)
    _done()


def main(argv: list[str]) -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)
    # whole lines only: progress bars (Keras verbose=1, tqdm) become log lines (lines.py)
    sys.stdout = LineStream(sys.stdout)
    sys.stderr = LineStream(sys.stderr)
    atexit.register(_flush)  # a last partial line, at a normal exit
    from ringtrain.rank import agent as rankagent  # noqa: PLC0415 - standard library only

    rankagent.start_from_env()  # check in with a supervising launcher, if there is one
    args = argv[1:] if argv[:1] == ["--mpi"] else argv
    if not args:
        sys.exit("usage: python -m ringtrain.rank.entry [--mpi] SCRIPT [ARGS...]")
    run_script(args)


if __name__ == "__main__":
    main(sys.argv[1:])
