"""Hooks the rank agent puts on Horovod and TensorFlow as they are imported, so any script
is reported, not just ringtrain's: ``hvd.init()`` begun and done (with the ring's sockets
remembered for rank/abort.py), and under a TF strategy the calls where a task waits for its
cluster holding the GIL. Standard library only: Horovod and TensorFlow are never imported here,
only wrapped once the script imports them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from ringtrain.rank import abort, iterators


class WrapOnImport(importlib.abc.MetaPathFinder):
    """Calls ``wrap(module)`` once the module ``target`` has been executed on first import."""

    def __init__(self, target: str, wrap: Callable[[ModuleType], None]) -> None:
        self.target = target
        self.wrap = wrap

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        wrap = self.wrap

        def exec_module(module: ModuleType) -> None:
            original(module)
            wrap(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def on_import(target: str, wrap: Callable[[ModuleType], None]) -> None:
    loaded = sys.modules.get(target)
    if loaded is not None:  # imported before ringtrain (a relayed child): wrap it now
        wrap(loaded)
    else:
        sys.meta_path.insert(0, WrapOnImport(target, wrap))


HOROVOD_BASICS = "horovod.common.basics"  # HorovodBasics.init, shared by every framework binding


def wrap_init(
    module: ModuleType, on_init: Callable[[Any], None], on_begin: Callable[[], None]
) -> None:
    """``on_begin()`` before ``hvd.init()`` runs (it blocks until every rank calls it),
    ``on_init(hvd)`` after; the sockets it opened are the ring's (``abort.remember``)."""
    basics = getattr(module, "HorovodBasics", None)
    if basics is None:
        return
    original = basics.init

    def init(self: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            on_begin()
        before = abort.open_sockets()
        abort.forming(before)  # until it returns, what it opens may be aborted (rank/abort.py)
        try:
            result = original(self, *args, **kwargs)
        except ValueError as exc:
            raise ring_not_formed(exc) from exc
        finally:
            abort.forming(None)
        with contextlib.suppress(Exception):
            abort.remember(before, abort.open_sockets())  # the ring's sockets (rank/abort.py)
            on_init(self)
        return result

    basics.init = init


# What hvd.init() raises when its background thread could not set up the ring; with ringtrain's
# Horovod (scripts/horovod-0.28.1-ringtrain.patch) that includes a peer lost while the Gloo
# contexts formed, which without the patch ended every survivor in std::terminate
INIT_FAILED = "Horovod initialization failed"


def ring_not_formed(exc: ValueError) -> Exception:
    """``hvd.init()``'s failure under Horovod's elastic driver (``HOROVOD_ELASTIC=1``) as
    Horovod's internal error, the one an elastic reset answers (ringtrain.keras.memory,
    ``hvd.elastic.run``), so the survivors of a fault during a re-form try the next round;
    any other ValueError, and every failure outside the elastic driver, as it was."""
    if os.environ.get("HOROVOD_ELASTIC") != "1" or INIT_FAILED not in str(exc):
        return exc
    try:  # Horovod is imported (its init ran); named here, never imported by this module
        errors = importlib.import_module("horovod.common.exceptions")
    except ImportError:
        return exc
    internal = getattr(errors, "HorovodInternalError", None)
    if not (isinstance(internal, type) and issubclass(internal, Exception)):
        return exc
    return internal("the ring could not be formed again (a peer was lost while it formed; "
                    "see Horovod's log line above)")


HOROVOD_ELASTIC = "horovod.common.elastic"  # run_fn: hvd.elastic.run of every framework
RESET_TRIES = 5  # a reset whose ring cannot form (a fault in each round) is tried this often


def wrap_elastic_run(module: ModuleType) -> None:
    """``hvd.elastic.run`` (Horovod's ``run_fn``) with its reset tried again when the ring
    cannot form (``ring_not_formed``): Horovod calls ``reset()`` outside its handler, so a
    fault during the re-form ended the worker. Wrapped before the framework bindings import
    ``run_fn`` by name."""
    original = getattr(module, "run_fn", None)
    internal = getattr(module, "HorovodInternalError", None)
    if original is None or not (isinstance(internal, type) and issubclass(internal, Exception)):
        return
    updated = getattr(module, "HostsUpdatedInterrupt", None)
    resets = tuple(kind for kind in (internal, updated)
                   if isinstance(kind, type) and issubclass(kind, BaseException))

    def run_fn(func: Callable[..., Any], reset: Callable[[], Any]) -> Any:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except resets as exc:  # Horovod resets: the failed run's iterators go aside
                iterators.set_aside(exc)
                raise

        def reset_again() -> Any:
            iterators.let_go()  # Horovod's except has let the failure go: drop them beside
            for attempt in range(1, RESET_TRIES + 1):
                try:
                    return reset()
                except internal:
                    if attempt == RESET_TRIES:
                        raise
                    sys.stderr.write(f"ringtrain: elastic: the ring could not be formed again "
                                     f"(try {attempt} of {RESET_TRIES}); joining the next "
                                     "round\n")
            return None

        return original(run, reset_again)

    module.run_fn = run_fn  # type: ignore[attr-defined]


TF_BINDINGS = "tensorflow.python.pywrap_tfe"
# The C calls where a task joins its TensorFlow cluster and waits for every other task:
# collective ops (MultiWorkerMirroredStrategy) or a server def (the parameter-server
# coordinator). TensorFlow's eager context calls them through this module, once each.
TF_JOIN_CALLS = ("TFE_EnableCollectiveOps", "TFE_ContextSetServerDef",
                 "TFE_ContextSetServerDefWithTimeoutAndRetries", "TFE_ContextUpdateServerDef")


def wrap_tf_join(module: ModuleType, send: Callable[[str], None]) -> None:
    """The calls in ``TF_JOIN_CALLS`` hold the GIL until the whole cluster has come, so this
    rank's heartbeat thread stops meanwhile. The launcher is told before and after, so it
    waits for the cluster instead of calling this rank silent."""
    for name in TF_JOIN_CALLS:
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, _announced(original, send))


def _announced(original: Callable[..., Any], send: Callable[[str], None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            send("tf_forming")
        try:
            return original(*args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                send("tf_formed")

    return call
