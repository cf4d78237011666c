"""Per-rank entry point: ``python -m ringtrain.launch.rankexec [--mpi] SCRIPT ARGS...``.

Two jobs, both about one rank's process, before the training script runs:

* stdout/stderr become line-buffered. Open MPI's ``--tag-output`` tags each chunk a rank writes,
  so unbuffered output (``print`` writes the text and the newline separately) tears lines apart;
  line buffering makes one write per line.
* with ``--mpi``, the script runs under mpi4py's runner, which turns an uncaught exception into
  ``MPI_Abort`` of the whole job instead of leaving the other ranks blocked in a collective.
  Without it (Gloo), the script runs with runpy and an exception exits the rank with status 1;
  horovodrun then stops the remaining ranks.
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str]) -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)
    from ringtrain.launch import rankagent  # noqa: PLC0415 - standard library only

    rankagent.start_from_env()  # check in with a supervising launcher, if there is one
    use_mpi = bool(argv) and argv[0] == "--mpi"
    args = argv[1:] if use_mpi else argv
    if not args:
        sys.exit("usage: python -m ringtrain.launch.rankexec [--mpi] SCRIPT [ARGS...]")
    if use_mpi:
        from mpi4py import run as mpi_run  # noqa: PLC0415 - only ranks need mpi4py

        sys.argv[:] = ["mpi4py", *args]
        mpi_run.main()
        return
    sys.argv[:] = args
    sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
