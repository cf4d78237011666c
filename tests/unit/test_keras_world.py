"""Which world ringtrain.keras is in, from TF_CONFIG, and the ranks and sizes it reports there
(the broadcasts over TensorFlow's collectives run on the simulated cluster:
tests/integration/test_tf_strategy_sim.py)."""

from __future__ import annotations

import json

import pytest

from ringtrain.errors import UsageError
from ringtrain.keras import world as keras_world

CLUSTER = {"chief": ["a:1"], "worker": ["a:2", "b:1", "b:2"], "ps": ["a:3", "b:3"]}


def _config(cluster: dict[str, list[str]], kind: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


def test_the_kind_follows_tf_config() -> None:
    assert keras_world.kind_from_env({}) == keras_world.HOROVOD
    assert keras_world.kind_from_env({"TF_CONFIG": _config(CLUSTER, "chief", 0)}) == "tf-ps"
    workers = {"worker": CLUSTER["worker"]}
    assert keras_world.kind_from_env({"TF_CONFIG": _config(workers, "worker", 1)}) == (
        "tf-multiworker")
    with pytest.raises(UsageError, match="TF_CONFIG is not valid JSON"):
        keras_world.kind_from_env({"TF_CONFIG": "{cluster"})


def test_ranks_and_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    workers = {"worker": CLUSTER["worker"]}
    for index in range(3):
        monkeypatch.setenv("TF_CONFIG", _config(workers, "worker", index))
        world = keras_world.world()
        assert (world.kind, world.rank(), world.size(), world.all_write) == (
            "tf-multiworker", index, 3, True)
    with_chief = {"chief": ["a:1"], "worker": ["a:2", "b:1"]}  # MWMS with a chief: it is rank 0
    monkeypatch.setenv("TF_CONFIG", _config(with_chief, "worker", 1))
    assert (keras_world.world().rank(), keras_world.world().size()) == (2, 3)
    monkeypatch.setenv("TF_CONFIG", _config(CLUSTER, "chief", 0))
    coordinator = keras_world.world()
    assert (coordinator.kind, coordinator.rank(), coordinator.size()) == ("tf-ps", 0, 3)
    assert coordinator.broadcast_object({"x": 1}) == {"x": 1}


def test_a_multiworker_broadcast_needs_the_models_strategy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", _config({"worker": ["a:1", "b:1"]}, "worker", 0))
    with pytest.raises(UsageError, match="MultiWorkerMirroredStrategy's scope"):
        keras_world.world(model=None).broadcast_object({"step": 1})
