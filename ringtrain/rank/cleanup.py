"""Clean-ups that must run however a rank ends: at a normal exit (atexit) and also when
``ringtrain.rank.entry`` ends a failing rank at once with ``os._exit`` (which skips atexit).
``ringtrain.keras`` registers its checkpoint staging directory here, so a failed attempt
leaves no ``ringtrain-ckpt-*`` directory behind; and what must end before the script counts as
done (``before_done``: the last checkpoint upload). Standard library only."""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable
from typing import Any

_PENDING: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []


def at_exit(fn: Callable[..., Any], *args: Any) -> None:
    if not _PENDING:
        atexit.register(run_all)
    _PENDING.append((fn, args))


def run_all() -> None:
    """Run (once) everything registered, newest first; a clean-up's failure is ignored."""
    while _PENDING:
        fn, args = _PENDING.pop()
        with contextlib.suppress(Exception):
            fn(*args)


_BEFORE_DONE: list[Callable[[], Any]] = []


def before_done(fn: Callable[[], Any]) -> None:
    """Run ``fn`` when the script has returned, before the rank tells the launcher it is done
    (``ringtrain.keras``: the last checkpoint upload). Its exception fails the rank."""
    if fn not in _BEFORE_DONE:
        _BEFORE_DONE.append(fn)


def run_before_done() -> None:
    """Each ``before_done`` function, in order; the first exception propagates."""
    for fn in list(_BEFORE_DONE):
        fn()


_ON_STATUS: list[Callable[[int], Any]] = []


def on_exit_status(fn: Callable[[int], Any]) -> None:
    """Call ``fn(status)`` when ``ringtrain.rank.entry`` ends the rank at once with a status
    (``os._exit``): a warm process tells its stand-in (``warm``)."""
    _ON_STATUS.append(fn)


def tell_exit_status(status: int) -> None:
    for fn in _ON_STATUS:
        with contextlib.suppress(Exception):
            fn(status)
