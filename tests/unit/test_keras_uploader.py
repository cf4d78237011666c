"""Rank 0's background uploads (issue 26, item 4): training goes on while a checkpoint
commits, one upload at a time, a failure raised in the training thread, the end awaited."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
import tensorflow as tf

from ringtrain.checkpoint import Store, list_checkpoints, open_store
from ringtrain.errors import CheckpointError
from ringtrain.keras import epochs, state
from ringtrain.keras.uploader import Uploader
from ringtrain.rank import cleanup


def test_one_upload_at_a_time_and_the_next_commit_is_not_taken(
        capsys: pytest.CaptureFixture[str]) -> None:
    up = Uploader()
    release = threading.Event()
    assert up.ready_for("epoch 1")
    up.start(release.wait, "epoch 1")
    assert up.busy() and not up.ready_for("epoch 2") and up.not_taken == 1
    assert ("checkpoint: epoch 2 not committed: the upload of epoch 1 is still running (one "
            "upload at a time); training goes on") in capsys.readouterr().out
    release.set()
    up.wait()
    assert not up.busy() and up.ready_for("epoch 3")
    assert up.wait in cleanup._BEFORE_DONE  # the rank entry waits before "done"


def test_a_failed_upload_is_raised_in_the_training_thread_once() -> None:
    up = Uploader()

    def fail() -> None:
        raise CheckpointError("storage down for 2 checkpoints in a row", "bring it back")

    up.start(fail, "epoch 1")
    up._thread.join()  # type: ignore[union-attr]
    with pytest.raises(CheckpointError, match="in a row"):
        up.ready_for("epoch 2")
    assert up.ready_for("epoch 2")  # raised once, not for ever
    up.start(fail, "epoch 2")
    with pytest.raises(CheckpointError):
        up.wait()


class Slow(Store):
    """A local store whose uploads wait until the test lets them go."""

    __slots__ = ()
    gate: ClassVar[threading.Event] = threading.Event()

    def put_file(self, rel: str, local: Path) -> None:
        Slow.gate.wait(timeout=60)
        super().put_file(rel, local)


def test_training_goes_on_while_rank_0_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "store")
    base = open_store(url)
    slow = Slow(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    monkeypatch.setattr(state, "_STATE", state._State(stores={url: slow}))
    monkeypatch.setattr(epochs, "UPLOADER", Uploader())
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    Slow.gate.clear()
    try:
        started = time.monotonic()
        epochs._commit(model, model.optimizer, url, epoch=1, step=10, keep=3, meta={})
        assert time.monotonic() - started < 5  # back to training with the upload held
        assert list_checkpoints(open_store(url)) == ()  # not visible until committed
        epochs._commit(model, model.optimizer, url, epoch=2, step=20, keep=3, meta={})
        assert "epoch 2 not committed: the upload of epoch 1" in capsys.readouterr().out
    finally:
        Slow.gate.set()
    epochs.UPLOADER.wait()
    assert [c.step for c in list_checkpoints(open_store(url))] == [10]
    out = capsys.readouterr().out
    assert "checkpoint: committed epoch 1 step 10" in out and "in the background" in out
    staging = state._STATE.staging_dir()
    assert list(staging.iterdir()) == []  # the snapshot removed once uploaded
    epochs._commit(model, model.optimizer, url, epoch=3, step=30, keep=3, meta={},
                   background=False)  # async_commit=False: committed before it returns
    assert sorted(c.step for c in list_checkpoints(open_store(url))) == [10, 30]
