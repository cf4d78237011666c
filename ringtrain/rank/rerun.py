"""Running the script again in the same process: the seam between the rank entry and
``ringtrain.keras.memory``.

The entry (``ringtrain.rank.entry``) says it can run the script again (``enable``); code that
knows when a failure only means "form the ring again" registers a hook (``register``), and the
entry asks the hooks about an exception that left the script (``wanted``). Standard library
only, like the rest of ``ringtrain.rank``: the entry never imports TensorFlow or Horovod.
"""

from __future__ import annotations

from collections.abc import Callable

_ON = {"entry": False}
_HOOKS: list[Callable[[BaseException], bool]] = []


def enable() -> None:
    """Called by the rank entry before it runs the script."""
    _ON["entry"] = True


def enabled() -> bool:
    return _ON["entry"]


def register(hook: Callable[[BaseException], bool]) -> None:
    """``hook(exc)``: True when it has made the process ready to run the script again."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def wanted(exc: BaseException) -> bool:
    """Whether a registered hook wants the script run again after ``exc``."""
    return _ON["entry"] and any(hook(exc) for hook in list(_HOOKS))
