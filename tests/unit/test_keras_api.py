"""ringtrain.keras's commit under a storage outage: shorter than the grace costs a wait,
longer skips that checkpoint with a warning, two lost in a row stop training."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
from pathlib import Path
from typing import ClassVar

import pytest

import ringtrain.keras as rt
from ringtrain.checkpoint import Store, list_checkpoints, open_store
from ringtrain.checkpoint.store import StorageError
from ringtrain.errors import CheckpointError
from ringtrain.keras import epochs, restore, state


class Flaky(Store):
    """A local store whose uploads fail with a connection error the first ``down`` times."""

    __slots__ = ()
    down: ClassVar[list[int]] = [0]

    def put_file(self, rel: str, local: Path) -> None:
        if Flaky.down[0] > 0:
            Flaky.down[0] -= 1
            raise StorageError("put", self.url_of(rel), ConnectionRefusedError("refused"))
        super().put_file(rel, local)


@pytest.fixture
def flaky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    url = str(tmp_path / "store")
    base = open_store(url)
    store = Flaky(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    monkeypatch.setattr(state, "_STATE", state._State(stores={url: store}))
    monkeypatch.setattr(epochs.time, "sleep", lambda _s: None)  # the waits, not their length
    src = tmp_path / "src"
    src.mkdir()
    (src / "ckpt.index").write_bytes(b"x" * 100)
    return url, src


def test_an_outage_shorter_than_the_grace_costs_a_wait(
    flaky: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, src = flaky
    monkeypatch.setenv("RINGTRAIN_CHECKPOINT_GRACE", "3600")
    Flaky.down[0] = 3
    assert epochs._commit_within_grace(url, src, step=5, epoch=1, meta={}, keep=3) is not None
    assert capsys.readouterr().out.count("storage unavailable") == 3
    assert [c.step for c in list_checkpoints(open_store(url))] == [5]


def test_a_longer_outage_skips_one_checkpoint_then_stops(
    flaky: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, src = flaky
    monkeypatch.setenv("RINGTRAIN_CHECKPOINT_GRACE", "0")
    Flaky.down[0] = 100
    assert epochs._commit_within_grace(url, src, step=5, epoch=1, meta={}, keep=3) is None
    assert "skipping the checkpoint of epoch 1, training goes on" in capsys.readouterr().out
    with pytest.raises(CheckpointError, match="down for 2 checkpoints in a row") as info:
        epochs._commit_within_grace(url, src, step=10, epoch=2, meta={}, keep=3)
    assert "--checkpoint-grace" in info.value.hint
    Flaky.down[0] = 0
    state._STATE.skipped = 0
    assert epochs._commit_within_grace(url, src, step=15, epoch=3, meta={}, keep=3) is not None


def test_an_unwritable_checkpoint_location_is_found_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a regular file, not a directory")
    with pytest.raises(CheckpointError, match="cannot write checkpoints to") as info:
        restore._check_writable(open_store(str(blocker / "ckpt")))
    assert "--checkpoint" in info.value.hint
    restore._check_writable(open_store(str(tmp_path / "ok")))  # and a good one passes, leaving
    assert [p.name for p in (tmp_path / "ok").iterdir()] == []  # nothing behind


def _planted_link(directory: Path, name: str, victim: Path) -> Path:
    """Another user's symlink in a shared checkpoint directory, pointing at a file of ours."""
    directory.mkdir(exist_ok=True)
    victim.write_bytes(b"secret")
    victim.chmod(0o600)
    link = directory / name
    link.symlink_to(victim)
    return link


def test_the_write_check_goes_through_no_planted_link(tmp_path: Path) -> None:
    """Issue 23: the write check's name was .ringtrain-write-check-<pid>, and its write
    followed a symlink planted there, overwriting the file it pointed to."""
    shared, victim = tmp_path / "shared", tmp_path / "victim"
    links = [_planted_link(shared, f".ringtrain-write-check-{pid}", victim)
             for pid in (os.getpid(), os.getpid() + 1)]
    restore._check_writable(open_store(str(shared)))
    assert victim.read_bytes() == b"secret"
    assert all(link.is_symlink() for link in links)
    assert sorted(p.name for p in shared.iterdir()) == sorted(link.name for link in links)


def test_the_write_check_name_is_unpredictable_and_its_file_new_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left: list[str] = []
    monkeypatch.setattr(Store, "remove", lambda self, rel: left.append(rel))
    for _ in range(2):
        restore._check_writable(open_store(str(tmp_path / "ok")))
    assert left[0] != left[1]
    for rel in left:
        assert re.fullmatch(r"\.ringtrain-write-check-[0-9a-f]{32}", rel), rel
        assert (tmp_path / "ok" / rel).stat().st_mode & 0o777 == 0o600
    # a link already at the chosen name is refused, not followed
    shared, victim = tmp_path / "shared", tmp_path / "victim"
    _planted_link(shared, ".ringtrain-write-check-" + "ab" * 16, victim)
    monkeypatch.setattr(restore.secrets, "token_hex", lambda _n=None: "ab" * 16)
    with pytest.raises(CheckpointError, match=r"cannot write checkpoints to .*FileExistsError"):
        restore._check_writable(open_store(str(shared)))
    assert victim.read_bytes() == b"secret"


def test_the_public_api_keeps_its_names() -> None:
    """``import ringtrain.keras as rt`` gives the functions, not same-named submodules."""
    for name in ("resume", "resumed", "callbacks", "save", "checkpoint_url", "progress",
                 "step_time"):
        assert callable(getattr(rt, name)) and not isinstance(getattr(rt, name), type(rt)), name
    assert rt.ResumePoint(step=1, epoch=1, manifest="m").epoch == 1
    assert set(rt.__all__) <= set(dir(rt))


def test_under_horovods_elastic_driver_whichever_process_is_rank_0_commits(
    tmp_path: Path,
) -> None:
    """A script in hvd.elastic.run keeps its callbacks across resets, while rank 0 may become
    another process: every rank holds the commit, and acts only while it is rank 0. (One real
    Horovod process, in a child: hvd.init() in pytest's own process would break every later
    test that starts mpirun from it. The world seam says which rank it is.)"""
    child = multiprocessing.get_context("spawn").Process(
        target=_elastic_commit_as_rank_1_then_0, args=(str(tmp_path / "store"),))
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0, f"the Horovod child failed (exit {child.exitcode}); see stderr"


def _elastic_commit_as_rank_1_then_0(url: str) -> None:
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from ringtrain.keras import world as keras_world

    hvd.init()
    os.environ["HOROVOD_ELASTIC"] = "1"
    state._STATE = state._State()
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    rank = [1]

    class Seen:
        kind = keras_world.HOROVOD
        all_write = False

        def rank(self) -> int:
            return rank[0]

        def size(self) -> int:
            return 2

    keras_world.world = lambda model=None: Seen()  # type: ignore[assignment]
    found = rt.callbacks(url=url)
    commit = next(c for c in found if isinstance(c, rt.CommitCheckpoint))
    commit.set_model(model)
    commit.on_epoch_end(0)  # rank 1 now: nothing written
    assert list_checkpoints(open_store(url)) == ()
    rank[0] = 0  # after a reset this process is rank 0
    commit.on_epoch_end(1)
    rt.wait_for_commits()  # uploaded in the background
    (listed,) = list_checkpoints(open_store(url))
    assert listed.ok and listed.manifest is not None and listed.manifest.epoch == 2


def _batch_hooks(callback: object) -> bool:
    import tensorflow as tf

    base = tf.keras.callbacks.Callback
    return any(getattr(type(callback), name) is not getattr(base, name)
               for name in ("on_train_batch_begin", "on_train_batch_end", "on_batch_end"))


def test_parameter_servers_get_no_batch_level_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ParameterServerStrategy's Keras refuses batch-level callbacks (ValueError in fit): the
    coordinator's callbacks have none, the preemption commit included; Horovod's rank 0 has it."""
    monkeypatch.setattr(state, "_STATE", state._State())
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
        "task": {"type": "chief", "index": 0}}))
    found = rt.callbacks(url=str(tmp_path / "store"))
    assert [type(c).__name__ for c in found if _batch_hooks(c)] == []
    assert any(isinstance(c, rt.CommitCheckpoint) for c in found)
