"""How the launcher starts ringtrain's own Python on a host, kept from the working directory.

``python -m M`` puts the working directory first on ``sys.path`` (``python -c`` the same, as
``''``): a ``sysconfig.py``, ``json.py`` or ``ringtrain/`` planted there by whoever can write
it runs in place of the standard library or of ringtrain, as whoever launches (often root).
ringtrain's helpers on the hosts need nothing from there, so:

* ``module_argv``: ``python -I -m M`` for the helpers that import only the standard library
  and ringtrain (the reaper, the secrets file, the TF port check, the ring check's GPU-to-GPU
  program). ``-I`` leaves the working directory, ``PYTHONPATH`` and the user's site-packages
  out: ringtrain is found where it is installed (a virtual environment, site-packages, an
  editable install's finder), as on every host that runs ranks.
* ``from_root``: a command run from ``/`` (a fixed ``sh`` line, the argv as its arguments,
  never pasted in), for the one that needs the user's environment: the warm process, which
  imports TensorFlow and Horovod from wherever the ranks find them (``PYTHONPATH``, the
  user's site-packages) and then becomes a rank (``-I`` would hide them; ``-P``, Python
  3.11+, is not on every host's Python). The probe's own Python sections do the same inside
  its script (``probe/hostprobe.py``: ``cd /`` first).

Not the rank entry (``ringtrain.rank.entry``): it runs the user's own program in the user's
working directory, by design. PURE (argv values only); standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

NEUTRAL_DIR = "/"  # root's: nobody else can plant a module there
_FROM_ROOT = 'cd / && exec "$@"'


def module_argv(python: str, module: str, *args: str) -> tuple[str, ...]:
    """``python -I -m module args...``: ringtrain's own module, isolated."""
    return (python, "-I", "-m", module, *args)


def from_root(argv: Sequence[str], name: str = "ringtrain") -> tuple[str, ...]:
    """``argv`` run from ``/`` (``sh -c 'cd / && exec "$@"'``, ``name`` as its ``$0``): the
    same process once ``exec`` runs, so its parent and PID are what ``argv`` alone would
    have."""
    return ("sh", "-c", _FROM_ROOT, name, *argv)
