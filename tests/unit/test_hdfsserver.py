"""`sim up --hdfs`'s server (ringtrain.sim.hdfsserver): bad input is refused before any JVM
starts, and `sim down` signals only a minicluster JVM of that state dir, never a reused PID."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringtrain.errors import SetupError
from ringtrain.sim.hdfsserver import running_hdfs_server, start_hdfs_server, stop_hdfs_server


@pytest.mark.parametrize(("ip", "datanodes", "said"), [
    ("gpu01", 1, "IPv4 address"),
    ("::1", 1, "IPv4 address"),
    ("10.213.7.1", 0, "at least one DataNode"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, ip: str, datanodes: int,
                                                      said: str) -> None:
    with pytest.raises(SetupError, match=said):
        start_hdfs_server(tmp_path / "hdfs", ip, datanodes=datanodes)
    assert not (tmp_path / "hdfs").exists()


@pytest.mark.parametrize("state", [
    "not json",
    json.dumps({"pid": "12", "url": "hdfs://10.0.0.1:1"}),
    json.dumps({"pid": os.getpid(), "url": "hdfs://10.0.0.1:1"}),  # alive, but not a MiniHdfs
])
def test_a_state_file_naming_no_minicluster_is_no_server(tmp_path: Path, state: str) -> None:
    (tmp_path / "server.json").write_text(state)
    assert running_hdfs_server(tmp_path) is None
    assert stop_hdfs_server(tmp_path) is False  # and this process got no signal
    assert stop_hdfs_server(tmp_path / "never-started") is False
