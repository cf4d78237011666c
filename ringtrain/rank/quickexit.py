"""A done rank's exit while a thread still frees a tf.data iterator (``rank/iterators.py``):
the free can wait out TensorFlow's autotune period, up to 60 s, and finalising TensorFlow
beneath it is not safe, so the rank ends without the interpreter's finalisation, doing first
what that finalisation would do for the script, in its order:

1. ``threading._shutdown()``: the hooks registered with ``threading._register_atexit`` run
   (``concurrent.futures`` tells its pools' workers to stop), then the non-daemon threads
   are joined;
2. the ``atexit`` handlers (Horovod's shutdown, logging's, the script's own);
3. MPI finalised when mpi4py initialised it and nothing has finalised it (mpi4py does it from
   a C exit hook, which ``os._exit`` skips; Open MPI takes a rank that ends without
   ``MPI_Finalize`` for a failed one);
4. every open file closed, as its deallocation would: text layers first, then buffered and
   compressed streams (gzip, bz2 and lzma write their trailers at close), then raw files;
   the standard streams are flushed, not closed.

Then the entry ends the process with ``os._exit(0)``. What this does not do: call the
``__del__`` of objects that write only there (a ``zipfile.ZipFile`` or ``tarfile`` left open,
a ``tf.io.gfile.GFile`` never closed) or C exit hooks other than MPI's. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import sys
import threading
from typing import Any


def finalise_like_python() -> None:
    """Steps 1-4 above; each step's failure is ignored, as finalisation ignores them."""
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    _finalise_mpi()
    close_open_files()


def _finalise_mpi() -> None:
    mpi: Any = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return
    with contextlib.suppress(Exception):
        if mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.Finalize()


def _standard(value: io.IOBase) -> bool:
    streams = (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)
    if any(value is s or value is getattr(s, "buffer", None) for s in streams):
        return True
    with contextlib.suppress(Exception):
        return value.fileno() in (0, 1, 2)
    return False


def close_open_files() -> None:
    """Close every open file object (flush the standard streams), outer layers first."""
    found = [v for v in gc.get_objects() if isinstance(v, io.IOBase)]
    layers = ([v for v in found if isinstance(v, io.TextIOBase)],
              [v for v in found if isinstance(v, io.BufferedIOBase)],
              [v for v in found if not isinstance(v, (io.TextIOBase, io.BufferedIOBase))])
    for layer in layers:
        for value in layer:
            with contextlib.suppress(Exception):
                if value.closed:
                    continue
                if _standard(value):
                    value.flush()
                else:
                    value.close()
