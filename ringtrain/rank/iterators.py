"""A failed run's tf.data iterators, freed beside the next run instead of in its way.

Freeing a tf.data iterator (TensorFlow 2.15) cancels its autotune thread and joins it. That
thread can miss the cancellation: ``CancellationManager::StartCancel`` runs the callback that
wakes it before it marks itself cancelled, so a thread that wakes at once sees "not cancelled"
and waits out the rest of its optimisation period, which doubles up to 60 s. Measured here:
a freed iterator waited 2.1 s in 3 of 28 frees on 2 loaded cores (``del it`` after 3 s of
``next``; none in 12 on idle cores), and in a Horovod rank a survivor's free of the failed
run's iterator took 4.8 s in about half of the resets, while every other survivor waited for
it at the next ring. The wait releases the GIL, so it costs nothing where no one waits on it.

So, on an elastic reset (``set_aside``): each ``OwnedIterator`` the failure's frames hold
gives up its resource handle here, while the traceback still holds it, and once the traceback
is gone (``let_go``) a thread of its own drops the handles of the iterators that went with it
(one still held elsewhere, say passed into ``hvd.elastic.run``'s function, gets its back).
Only the iterators' handles move; the rest of the old world is freed where it always was
(freeing all of it in a thread once cost a survivor Gloo's 30 s send timeout in
``hvd.shutdown()``, commit 5a0bb21).

The end of a ``fit`` pays the same wait: the epochs' iterator is freed as ``fit`` returns, and
after a few minutes of training its autotune period is 60 s (a ``fit`` of 150 s, three
processes on two cores: one returned 52.3 s after ``on_train_end``; the fault-free campaign
run 58.7 s from its last batch to its exit). So ``ringtrain.keras``'s callbacks hand that
iterator here at ``on_train_end`` (``fit_iterators``, ``free_beside``), and the rank's exit
does not wait for its thread (``ringtrain.rank.entry``); outside the entry an ``atexit``
handler waits for it before TensorFlow is finalised, as before.

Standard library only, like the rest of ``ringtrain.rank``: iterators are told by their class.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

RESOURCE = "_iterator_resource"  # OwnedIterator's handle to its C++ iterator (tf 2.15)
AT_EXIT_S = 65.0  # the longest such wait: tf.data's longest optimisation period, 60 s
_ASIDE: list[tuple[weakref.ref[Any], Any]] = []  # (iterator, its handle)
_THREADS: list[threading.Thread] = []


def is_tf_iterator(value: object) -> bool:
    """A tf.data ``OwnedIterator`` (eager; ``iter(dataset)``, Keras' ``fit``)."""
    kind = type(value)
    return kind.__name__ == "OwnedIterator" and kind.__module__.startswith("tensorflow.")


def _tracebacks(exc: BaseException) -> list[TracebackType]:
    """The tracebacks of ``exc`` and of the exceptions it was raised from or during."""
    found: list[TracebackType] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            found.append(current.__traceback__)
        current = current.__cause__ or current.__context__
    return found


def _running_frames() -> set[int]:
    frames: set[int] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.add(id(frame))
        frame = frame.f_back
    return frames


def _dead_frames(exc: BaseException) -> list[FrameType]:
    """The frames the failure keeps: its tracebacks' and their callers (Keras filters its own
    frames out of a traceback, ``fit``'s among them, but the frames below still hold them as
    ``f_back``), not the ones running now, which caught it (reading their locals would tie
    their own ``exc`` to them: a cycle that keeps it all)."""
    running = _running_frames()
    found: dict[int, FrameType] = {}
    for tb in _tracebacks(exc):
        walk: TracebackType | None = tb
        while walk is not None:
            frame: FrameType | None = walk.tb_frame
            while frame is not None and id(frame) not in running and id(frame) not in found:
                found[id(frame)] = frame
                frame = frame.f_back
            walk = walk.tb_next
    return list(found.values())


def set_aside(exc: BaseException) -> int:
    """Take the resource handle of every tf.data iterator a local of a frame the failure keeps
    holds; kept here until ``let_go``. Returns how many were taken."""
    taken = 0
    for frame in _dead_frames(exc):
        for value in list(frame.f_locals.values()):
            if is_tf_iterator(value) and RESOURCE in vars(value):
                _ASIDE.append((weakref.ref(value), vars(value).pop(RESOURCE)))
                taken += 1
    return taken


def let_go() -> threading.Thread | None:
    """Once the failed run's traceback is gone: an iterator something still holds gets its
    handle back (the script may use it again); the other handles are dropped in a thread of
    their own, whose references are the last."""
    handles = _unclaimed()
    return _drop(handles) if handles else None


def _unclaimed() -> list[Any]:
    """The handles set aside whose iterators are gone; the others given back. (A function
    of its own: its locals, a handle among them, end before the thread starts.)"""
    handles = []
    for iterator, handle in _ASIDE:
        alive = iterator()
        if alive is None:
            handles.append(handle)
        else:
            vars(alive)[RESOURCE] = handle
    _ASIDE.clear()
    return handles


def fit_iterators(frame: FrameType | None, model: object, depth: int = 12) -> list[Any]:
    """From a callback's frame: the tf.data iterators ``fit``'s own frame (the nearest of
    ``depth`` callers whose ``self`` is ``model``) made, not ones the script passed in."""
    while frame is not None and depth > 0:
        local = frame.f_locals
        if frame.f_code.co_name == "fit" and local.get("self") is model:
            given = {id(local.get(name)) for name in ("x", "y", "validation_data")}
            return [v for v in local.values() if is_tf_iterator(v) and id(v) not in given]
        frame, depth = frame.f_back, depth - 1
    return []


def free_beside(found: Iterable[object]) -> threading.Thread | None:
    """Take these iterators' handles now (they are not used again) and drop them in a thread
    of their own; at exit, that thread is waited for before TensorFlow is finalised."""
    handles = [vars(it).pop(RESOURCE) for it in found
               if is_tf_iterator(it) and RESOURCE in vars(it)]
    if not handles:
        return None
    atexit.unregister(settle)  # registered once
    atexit.register(settle)
    return _drop(handles)


def _drop(handles: list[Any]) -> threading.Thread:
    """A thread whose references to ``handles`` are the last: it frees them."""
    thread = threading.Thread(target=handles.clear, name="ringtrain-old-iterators",
                              daemon=True)
    thread.start()
    _THREADS[:] = [t for t in _THREADS if t.is_alive()] + [thread]
    return thread


def settle(timeout: float = AT_EXIT_S) -> bool:
    """Before the interpreter finalises (after the rank said "done"): let a thread still
    freeing old iterators end, rather than finalise TensorFlow beneath it. True when none is
    left within ``timeout``."""
    deadline = time.monotonic() + timeout
    for thread in _THREADS:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in _THREADS)
