"""A failed run's tf.data iterators are freed in a thread of their own, not on the way to the
next ring (rank/iterators.py): real TensorFlow iterators, Horovod's real ``run_fn``."""

from __future__ import annotations

import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from horovod.common import elastic
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from ringtrain.keras.fitend import FreeAtTrainEnd
from ringtrain.rank import hooks, iterators

DATA = tf.data.Dataset.from_tensor_slices(np.arange(64, dtype=np.float32)).repeat().batch(4)


def _freed_by(handle: Any) -> tuple[weakref.ref[Any], list[str]]:
    """A weak reference to ``handle`` that notes the thread that frees it."""
    where: list[str] = []
    return weakref.ref(handle, lambda _: where.append(threading.current_thread().name)), where


def _fail_holding(iterator: Any, fault: Callable[[], BaseException]) -> None:
    next(iterator)
    raise fault()  # made here: an exception held by a frame of its own traceback is a cycle


def _fail_with_a_new_iterator(seen: dict[str, Any], fault: Callable[[], BaseException]) -> None:
    """Fail as fit fails: holding an iterator of its own (its handle watched in ``seen``)."""
    iterator = iter(DATA)
    seen["handle"], seen["where"] = _freed_by(getattr(iterator, iterators.RESOURCE))
    seen["iterator"] = weakref.ref(iterator)
    _fail_holding(iterator, fault)


def test_the_iterators_a_failure_holds_are_freed_in_a_thread_of_their_own() -> None:
    seen: dict[str, Any] = {}
    try:
        _fail_with_a_new_iterator(seen, lambda: RuntimeError("the ring is gone"))
    except RuntimeError as exc:
        assert iterators.set_aside(exc) == 1
        assert not hasattr(seen["iterator"](), iterators.RESOURCE)  # taken from it
    assert seen["iterator"]() is None  # gone with the traceback, freeing nothing
    assert seen["handle"]() is not None  # its handle: held by iterators alone
    thread = iterators.let_go()
    assert thread is not None
    thread.join(10)
    assert seen["handle"]() is None and seen["where"] == ["ringtrain-old-iterators"]
    assert iterators.let_go() is None  # nothing left aside


def test_an_iterator_in_the_exception_it_was_raised_from_is_taken_too() -> None:
    seen: dict[str, Any] = {}
    try:
        try:
            _fail_with_a_new_iterator(seen, lambda: ValueError("inner"))
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        assert iterators.set_aside(exc) == 1
    thread = iterators.let_go()
    assert thread is not None
    thread.join(10)
    assert seen["where"] == ["ringtrain-old-iterators"]


def test_an_iterator_that_outlives_the_failure_gets_its_handle_back() -> None:
    """Say one passed into hvd.elastic.run's function, to be used again after the reset."""
    kept = iter(DATA)
    try:
        _fail_holding(kept, lambda: RuntimeError("the ring is gone"))
    except RuntimeError as exc:
        assert iterators.set_aside(exc) == 1
    assert iterators.let_go() is None  # nothing to free
    assert next(kept).shape == (4,)
    assert not iterators.is_tf_iterator(object()) and iterators.is_tf_iterator(kept)


def test_a_failure_that_holds_no_iterator_takes_none() -> None:
    try:
        _fail_holding(iter([0.0]), lambda: RuntimeError("a list's iterator is not tf.data's"))
    except RuntimeError as exc:
        assert iterators.set_aside(exc) == 0
    assert iterators.let_go() is None


class _State:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def sync(self) -> None:
        self.calls.append("sync")

    def restore(self) -> None:
        self.calls.append("restore")

    def on_reset(self) -> None:
        self.calls.append("on_reset")

    def on_hosts_updated(self, *_: Any) -> None:  # notification_manager's listener
        pass


@pytest.mark.parametrize("fault", [lambda: HorovodInternalError("a peer is gone"),
                                   lambda: HostsUpdatedInterrupt(False)])
def test_hvd_elastic_run_drops_the_failed_runs_iterators_beside_its_reset(
        monkeypatch: pytest.MonkeyPatch, fault: Any) -> None:
    """Horovod's own run_fn: a run that fails holding fit's iterator, a reset, a run that
    trains. The reset finds the iterator's handle already taken and being freed aside."""
    monkeypatch.setattr(elastic, "run_fn", elastic.run_fn)  # the wrap is undone after
    hooks.wrap_elastic_run(elastic)
    seen: dict[str, Any] = {}

    def train(state: _State) -> str:
        if "handle" not in seen:
            _fail_with_a_new_iterator(seen, fault)
        return "trained"

    def reset() -> None:
        seen["taken"] = seen["iterator"]() is None or not hasattr(seen["iterator"](),
                                                                  iterators.RESOURCE)

    state = _State()
    assert elastic.run_fn(train, reset)(state) == "trained"
    assert seen["taken"]
    iterators.settle(10)
    assert seen["handle"]() is None and seen["where"] == ["ringtrain-old-iterators"]
    assert "on_reset" in state.calls and state.calls[-1] == "sync"


def test_keras_fit_s_iterator_is_found_though_keras_filters_its_frames_out() -> None:
    """Keras re-raises a failure in ``fit`` with its own frames cut from the traceback; the
    frames below still hold ``fit``'s (``f_back``), and with it the epoch's iterator."""

    class Fail(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 2:
                raise HorovodInternalError("a peer is gone")

    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer="sgd")
    data = tf.data.Dataset.from_tensor_slices((np.ones((64, 1)), np.ones((64, 1)))).repeat()
    try:
        model.fit(data.batch(4), steps_per_epoch=8, epochs=1, callbacks=[Fail()], verbose=0)
    except HorovodInternalError as exc:
        assert "fit" not in [tb.name for tb in traceback.extract_tb(exc.__traceback__)]
        assert iterators.set_aside(exc) == 1
    thread = iterators.let_go()
    assert thread is not None
    thread.join(10)


class _Spy(tf.keras.callbacks.Callback):
    """Before FreeAtTrainEnd: notes fit's iterator and who frees its handle."""

    def on_train_end(self, logs: Any = None) -> None:
        found = iterators.fit_iterators(sys._getframe(1), self.model)
        self.found = [weakref.ref(it) for it in found]
        self.handle, self.where = _freed_by(getattr(found[0], iterators.RESOURCE))


def _small_model() -> Any:
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer="sgd")
    return model


def test_fit_s_own_iterator_is_freed_in_a_thread_at_the_end_of_fit() -> None:
    """ringtrain.keras' FreeAtTrainEnd: the iterator fit made gives up its handle at
    on_train_end, and a thread of its own frees it, not fit's return."""
    model, spy, free = _small_model(), _Spy(), FreeAtTrainEnd()
    data = tf.data.Dataset.from_tensor_slices((np.ones((64, 1)), np.ones((64, 1)))).repeat()
    model.fit(data.batch(4), steps_per_epoch=8, epochs=2, callbacks=[spy, free], verbose=0)
    assert len(spy.found) == 1 and free.freed == 1
    assert iterators.settle(10)
    assert spy.handle() is None and spy.where == ["ringtrain-old-iterators"]
    model.fit(data.batch(4), steps_per_epoch=2, epochs=1, callbacks=[free], verbose=0)
    assert free.freed == 2  # each fit's own


def test_an_iterator_the_script_passed_to_fit_keeps_its_handle() -> None:
    """The script's own iterator (fit's ``x``) is the script's: it may read on after fit."""
    model, free = _small_model(), FreeAtTrainEnd()
    mine = iter(tf.data.Dataset.from_tensor_slices((np.ones((64, 1)),
                                                    np.ones((64, 1)))).repeat().batch(4))
    model.fit(mine, steps_per_epoch=4, epochs=1, callbacks=[free], verbose=0)
    assert hasattr(mine, iterators.RESOURCE)
    assert next(mine)[0].shape == (4, 1)


def test_fit_iterators_finds_nothing_outside_fit() -> None:
    assert iterators.fit_iterators(sys._getframe(), object()) == []
    assert iterators.free_beside([]) is None
