"""Rank 0's background uploads (issue 26, item 4): training goes on while a checkpoint
commits, one upload at a time (the next commit waits for it), a failure raised in the training
thread, the end awaited."""

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


def test_one_upload_at_a_time_and_the_next_commit_waits_for_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ringtrain.keras import uploader

    monkeypatch.setattr(uploader, "SAID_AFTER_S", 0.1)
    up = Uploader()
    release = threading.Event()
    up.before("epoch 1")
    up.start(release.wait, "epoch 1")
    assert up.busy()
    threading.Timer(0.3, release.set).start()
    up.before("epoch 2")  # returns once epoch 1's upload has ended
    assert not up.busy() and up.waited_s >= 0.2
    said = capsys.readouterr().out
    assert "checkpoint: epoch 2 waited 0." in said
    assert "s for the upload of epoch 1 (one upload at a time)" in said
    up.wait()
    assert up.wait in cleanup._BEFORE_DONE  # the rank entry waits before "done"


def test_a_failed_upload_is_raised_in_the_training_thread_once() -> None:
    up = Uploader()

    def fail() -> None:
        raise CheckpointError("storage down for 2 checkpoints in a row", "bring it back")

    up.start(fail, "epoch 1")
    up._thread.join()  # type: ignore[union-attr]
    with pytest.raises(CheckpointError, match="in a row"):
        up.before("epoch 2")
    up.before("epoch 2")  # raised once, not for ever
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
        threading.Timer(0.5, Slow.gate.set).start()
        epochs._commit(model, model.optimizer, url, epoch=2, step=20, keep=3, meta={})
        assert epochs.UPLOADER.waited_s > 0.2  # epoch 2 waited for epoch 1's upload
    finally:
        Slow.gate.set()
    epochs.UPLOADER.wait()
    assert sorted(c.step for c in list_checkpoints(open_store(url))) == [10, 20]
    out = capsys.readouterr().out
    assert "checkpoint: committed epoch 1 step 10" in out and "in the background" in out
    staging = state._STATE.staging_dir()
    assert list(staging.iterdir()) == []  # the snapshot removed once uploaded
    epochs._commit(model, model.optimizer, url, epoch=3, step=30, keep=3, meta={},
                   background=False)  # async_commit=False: committed before it returns
    assert sorted(c.step for c in list_checkpoints(open_store(url))) == [10, 20, 30]


def test_the_overhead_benchmark_measures_three_ways_on_one_target(tmp_path: Path) -> None:
    """``ringtrain ckpt bench --train``'s measurement, tiny: no commit, sync and background
    on a local directory, each run committing every epoch."""
    from ringtrain.bench.commit_overhead import MODES, measure
    from ringtrain.keras.uploader import UPLOADER

    urls: dict[str, str] = {}

    def url_of(mode: str) -> str:
        urls[mode] = str(tmp_path / mode)
        return urls[mode]

    got = measure("local disk", url_of, size_mb=1, epochs=2, steps=3, wait=UPLOADER.wait,
                  snapshots=UPLOADER.snapshots_s)
    assert set(got.epoch_s) == set(MODES) and all(t > 0 for t in got.epoch_s.values())
    assert got.step_s > 0 and got.snapshot_s > 0
    for mode in ("sync", "async"):  # keep=1: the last one, after 2 warm-up steps + 2 x 3
        assert [c.step for c in list_checkpoints(open_store(urls[mode]))] == [3 * 2 + 2]
    assert got.share("none") == 0.0
