"""ringtrain: launch and supervise Horovod ring all-reduce training across GPU hosts.

``ringtrain.run(...)`` launches from Python (see ``ringtrain.api``); ``ringtrain.keras`` is the
API for training scripts. Importing ``ringtrain`` itself stays cheap: the ranks import it.
"""

from typing import Any

from ringtrain.version import __version__

__all__ = ["__version__", "run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from ringtrain.api import run  # noqa: PLC0415 - only when asked for

        return run
    raise AttributeError(f"module 'ringtrain' has no attribute {name!r}")
