"""Checkpoints on a real HDFS cluster, only when one is given.

    RINGTRAIN_TEST_HDFS_URL=hdfs://namenode:8020/tmp/ringtrain \
        .venv/bin/python -m pytest tests/integration/test_checkpoint_hdfs.py

The client is hdfs-native (no JVM); Kerberos and HA settings come from its usual sources
(HADOOP_CONF_DIR, ticket cache). Without the variable the test is skipped; the protocol's HDFS
path is always exercised against hdfs-native's fsspec layer in tests/unit/test_checkpoint_store.py.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from ringtrain.checkpoint import CommitConflict, commit, find_latest, list_checkpoints, open_store
from tests.unit.test_checkpoint_store import make_src, same_tree


@pytest.mark.skipif(
    not os.environ.get("RINGTRAIN_TEST_HDFS_URL"),
    reason="set RINGTRAIN_TEST_HDFS_URL=hdfs://namenode:8020/some/dir to test a real HDFS",
)
def test_real_hdfs_round_trip(tmp_path: Path) -> None:
    base = os.environ["RINGTRAIN_TEST_HDFS_URL"].rstrip("/")
    store = open_store(f"{base}/ringtrain-test-{secrets.token_hex(4)}")
    try:
        for step in (1, 2, 3):
            commit(store, make_src(tmp_path, str(step)), step=step, epoch=step, keep=2)
        with pytest.raises(CommitConflict):
            commit(store, make_src(tmp_path, "x"), step=3, epoch=3)
        assert [c.step for c in list_checkpoints(store, deep=True) if c.ok] == [3, 2]
        restored = find_latest(store, tmp_path / "r")
        assert restored is not None and same_tree(tmp_path / "src-3", restored.directory)
    finally:
        store.remove_tree("")
