"""checkpoint/hdfs_errors.py on the errors hdfs-native raised against a real NameNode (texts
captured from tests/integration/test_checkpoint_hdfs.py's minicluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringtrain.checkpoint import hdfs_errors
from ringtrain.checkpoint.filesystems import Location, make_filesystem
from ringtrain.checkpoint.retry import describe, is_transient
from ringtrain.checkpoint.store import StorageError
from ringtrain.errors import CheckpointError

SAFE_MODE = RuntimeError(
    'RPCError("org.apache.hadoop.hdfs.server.namenode.SafeModeException", "Cannot create file'
    '/sm/data/x/ckpt.data-00000-of-00001. Name node is in safe mode.\\nIt was turned on '
    'manually. Use \\"hdfs dfsadmin -safemode leave\\" to turn safe mode off.\\n\\tat org.'
    'apache.hadoop.hdfs.server.namenode.FSNamesystem.newSafemodeException(FSNamesystem.java:1)")')
QUOTA = RuntimeError(
    'RPCError("org.apache.hadoop.hdfs.protocol.DSQuotaExceededException", "The DiskSpace quota '
    'of /q is exceeded: quota = 1 B = 1 B but diskspace consumed = 134217728 B = 128 MB\\n\\tat '
    'org.apache.hadoop.hdfs.server.namenode.DirectoryWithQuotaFeature.verifyStoragespaceQuota")')
DENIED = RuntimeError(
    'RPCError("org.apache.hadoop.security.AccessControlException", "Permission denied: user=bob,'
    ' access=WRITE, inode=\\"/alice\\":alice:supergroup:drwxr-xr-x\\n\\tat org.apache.hadoop")')


def test_the_namenodes_exception_is_read_back_without_its_stack() -> None:
    assert hdfs_errors.remote(SAFE_MODE) == (
        "SafeModeException",
        "Cannot create file/sm/data/x/ckpt.data-00000-of-00001. Name node is in safe mode.")
    assert hdfs_errors.remote(QUOTA) == (
        "DSQuotaExceededException",
        "The DiskSpace quota of /q is exceeded: quota = 1 B = 1 B but diskspace consumed = "
        "134217728 B = 128 MB")
    assert hdfs_errors.remote(ValueError("plain")) is None
    assert describe(DENIED).startswith("AccessControlException: Permission denied: user=bob")
    assert "\\tat" not in describe(DENIED)


def test_safe_mode_is_waited_out_a_full_quota_and_a_refusal_are_not() -> None:
    assert is_transient(SAFE_MODE)
    assert not is_transient(QUOTA) and not is_transient(DENIED)
    err = StorageError("put", "hdfs://nn:8020/q/run/data/x", QUOTA)
    assert err.message.startswith("put hdfs://nn:8020/q/run/data/x failed: "
                                  "DSQuotaExceededException: The DiskSpace quota of /q")
    assert "hdfs dfsadmin -setSpaceQuota" in err.hint and not err.transient
    assert "HADOOP_USER_NAME" in StorageError("put", "hdfs://x", DENIED).hint


def test_a_viewfs_url_without_a_mount_table_is_named_with_a_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real hdfs-native client refuses it while it is built (no server is reached): before,
    ``ckpt ls viewfs://cluster/x`` ended in its RuntimeError's traceback."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))  # an empty configuration
    with pytest.raises(CheckpointError, match=r"viewfs://cluster/x: the Hadoop configuration "
                       r"has no mount table for viewfs://cluster") as err:
        make_filesystem(Location.parse("viewfs://cluster/x"))
    assert "fs.viewfs.mounttable.cluster.link" in err.value.hint


# a read after the only DataNode holding the block stopped (hdfs-native 0.14.7, Hadoop 3.5.0)
DATANODES_DOWN = RuntimeError(
    'DataTransferError("All DataNodes failed: [DatanodeInfoProto { id: DatanodeIdProto { ip_addr:'
    ' \\"127.0.0.1\\", host_name: \\"127.0.0.1\\", datanode_uuid: \\"dec441d8-b0be-4813-bd93-77577'
    '7cbb384\\", xfer_port: 41817, info_port: 35091, ipc_port: 33011, info_secure_port: Some(0) },'
    ' capacity: Some(541106348032), dfs_used: Some(49152), remaining: Some(158846902272), '
    'block_pool_used: Some(49152), last_update: Some(1795706792658), xceiver_count: Some(0), '
    'location: Some(\\"/default-rack\\"), non_dfs_used: Some(36739637248), admin_state: Some('
    'Normal), cache_capacity: Some(0), cache_used: Some(0), last_update_monotonic: Some(66022164)'
    ', upgrade_domain: None, last_block_report_time: Some(1795706792712), '
    'last_block_report_monotonic: Some(66022218), num_blocks: Some(0) }]")')


def test_no_datanode_answering_is_short_named_and_waited_for_not_a_broken_checkpoint() -> None:
    assert hdfs_errors.remote(DATANODES_DOWN) == (
        "DataNodesFailed", "all DataNodes holding the block failed (127.0.0.1:41817)")
    assert is_transient(DATANODES_DOWN)  # resume fails rather than fall back or start over
    err = StorageError("get", "hdfs://nn:8020/c/manifests/m.json", DATANODES_DOWN)
    assert len(err.message) < 200, err.message
    assert "not lost" in err.hint and "dfs.replication 1" in err.hint
