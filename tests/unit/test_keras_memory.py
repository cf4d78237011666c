"""ringtrain.keras.memory's pure parts, and the Keras hook it starts a fit mid-epoch with
(``Model._training_state``, as Keras' BackupAndRestore sets it): pinned here on the installed
TensorFlow, since a Keras that stopped asking it would silently redo whole epochs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from ringtrain.keras import memory as elastic


def test_source_rank_is_the_most_commits_then_the_lowest_rank() -> None:
    assert elastic.source_rank([4, 4, 0]) == 0
    assert elastic.source_rank([0, 3, 5, 5]) == 2
    assert elastic.source_rank([0, 0]) is None  # a new job: the checkpoint store decides
    assert elastic.source_rank([]) is None


def test_world_changed_is_horovods_own_test_with_every_collective() -> None:
    assert elastic.world_changed(HostsUpdatedInterrupt(True)) == (
        "the hosts were updated (removed only)")
    assert elastic.world_changed(HostsUpdatedInterrupt(False)) == "the hosts were updated"
    assert elastic.world_changed(HorovodInternalError("ring broke")) == (
        "a collective failed (ring broke)")
    gloo = tf.errors.UnknownError(None, None, "Graph execution error:\n\nHorovodAllreduce_x "
                                  "failed: Connection closed by peer")
    assert elastic.world_changed(gloo) == "a collective failed (Graph execution error:)"
    assert elastic.world_changed(tf.errors.UnknownError(None, None, "a user's op")) is None
    assert elastic.world_changed(ValueError("HorovodAllreduce")) is None
    # Horovod's own test knows three op names; a grouped all-reduce (the DistributedOptimizer
    # with groups), a reduce-scatter or an all-to-all failing is a world change too
    for op in ("HorovodGroupedAllreduce", "HorovodReducescatter", "HorovodAlltoall"):
        failed = tf.errors.UnknownError(None, None, f"{{{{function_node __wrapped__{op}_"
                                        "grads_0}} Horovod has been shut down.")
        assert elastic.world_changed(failed) is not None, op
    assert elastic.world_changed(tf.errors.UnknownError(
        None, None, "MyHorovodishOp failed")) is None


def test_reset_only_under_horovods_elastic_driver_and_the_rank_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    assert not elastic.enabled()
    assert elastic.reset(HorovodInternalError("x")) is False
    assert not elastic.enabled({"HOROVOD_ELASTIC": "1"})  # run by plain python: no rerun


def test_describe_says_where_from_and_the_learning_rate_the_script_set() -> None:
    commit = elastic.Commit(7, 3, 20, 3, lr=0.003)
    text = elastic.describe(commit, source=1, size=2, lr=0.002, nbytes=220_000, took_s=0.12,
                            since_reset_s=4.25)
    assert text == ("ringtrain: elastic: resumed in memory at epoch 3 step 20 from rank 1 "
                    "(0.22 MB in 0.12 s); 3 -> 2 ranks; learning rate 0.003 -> 0.002, as the "
                    "script sets it for 2 ranks; 4.2 s after the reset")
    same = elastic.describe(elastic.Commit(1, 0, 0, 2, lr=0.002), source=0, size=2, lr=0.002,
                            nbytes=0, took_s=0.0, since_reset_s=None)
    assert "learning rate" not in same and "after the reset" not in same


class _Batches(tf.keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, start: elastic._StartAt | None) -> None:
        super().__init__()
        self.start = start
        self.seen: list[tuple[int, int]] = []
        self._epoch = -1

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.start is not None:
            self.model._training_state = self.start

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.seen.append((self._epoch, batch))


def _fit(start: elastic._StartAt | None, steps: int = 5) -> list[tuple[int, int]]:
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.zeros((8, 2), "float32"),
                                               np.zeros((8, 1), "float32"))).repeat().batch(2)
    seen = _Batches(start)
    model.fit(data, steps_per_epoch=steps, epochs=3, initial_epoch=1, verbose=0,
              callbacks=[seen])
    return seen.seen


def test_keras_starts_the_first_epoch_at_the_committed_step() -> None:
    assert _fit(None)[:2] == [(1, 0), (1, 1)]  # without it: the epoch from its first step
    seen = _fit(elastic._StartAt(1, 3))
    assert seen == [(1, 3), (1, 4)] + [(2, b) for b in range(5)]


def test_a_committed_step_past_a_shorter_epoch_starts_the_next_epoch() -> None:
    # 3 ranks ran 21 steps per epoch; 2 ranks run 32: the other way, step 30 of 21 is over
    assert elastic._StartAt(1, 30).maybe_load_initial_counters_from_ckpt(21, 1) == (2, 0)
    assert elastic._StartAt(1, 20).maybe_load_initial_counters_from_ckpt(32, 1) == (1, 20)


def test_commit_every_must_be_positive() -> None:
    from ringtrain.errors import UsageError

    with pytest.raises(UsageError, match="commit_every must be at least 1"):
        elastic.MemoryCommit(0)
