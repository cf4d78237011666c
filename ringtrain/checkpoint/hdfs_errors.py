"""HDFS's own errors, as hdfs-native reports them. PURE.

hdfs-native raises ``RuntimeError('RPCError("org.apache...SafeModeException", "message\\n\\tat
...Java stack...")')``: the NameNode's exception class and its message, stack trace included.
``remote`` reads the class and the message's first line back out; the rest of ringtrain uses
them for a short error, a fix (``hint``) and whether waiting can help (``transient``: safe mode
while the NameNode starts, a standby NameNode during a failover). Each was seen against a real
NameNode (tests/integration/test_checkpoint_hdfs.py).
"""

from __future__ import annotations

import re

_RPC = re.compile(r'RPCError\("(?P<cls>[\w.$]+)", "(?P<msg>.*)', re.S)
# A read whose block no DataNode served: hdfs-native's DataTransferError("All DataNodes failed:
# [DatanodeInfoProto { id: DatanodeIdProto { ip_addr: \"10.0.0.5\", ..., xfer_port: 9866, ...
_DATANODES = re.compile(r'DataTransferError\("All DataNodes failed')
_IP_ADDR = re.compile(r'ip_addr: \\?"([^"\\]{1,255})\\?"')
_XFER_PORT = re.compile(r"xfer_port: (\d{1,5})")
DATANODES_FAILED = "DataNodesFailed"  # not a Java class: the client's own verdict


def datanodes(text: str) -> list[tuple[str, str]]:
    """(ip, transfer port) of each DataNode an error names, in one pass (an ip_addr, then the
    first xfer_port after it; one pattern with a wildcard between them read the rest of the
    text again from each ip_addr)."""
    out, pos = [], 0
    while (ip := _IP_ADDR.search(text, pos)) and (port := _XFER_PORT.search(text, ip.end())):
        out.append((ip.group(1), port.group(1)))
        pos = port.end()
    return out


TRANSIENT = frozenset({"SafeModeException", "StandbyException", "RetriableException",
                       "ObserverRetryOnActiveException", DATANODES_FAILED})

HINTS = {
    "SafeModeException": (
        "the NameNode is in safe mode (starting up, or put there by an administrator): a "
        "short one is waited out within --checkpoint-grace; `hdfs dfsadmin -safemode get` says "
        "why; the previous checkpoint is intact"),
    "DSQuotaExceededException": (
        "the directory's HDFS space quota is full (HDFS reserves a whole block for a file "
        "being written): raise it (`hdfs dfsadmin -setSpaceQuota`), free space, keep fewer "
        "checkpoints (keep=N), or pass another --checkpoint; the previous checkpoint is intact"),
    "NSQuotaExceededException": (
        "the directory's HDFS name quota (files and directories) is full: raise it (`hdfs "
        "dfsadmin -setQuota`) or keep fewer checkpoints (keep=N)"),
    "AccessControlException": (
        "this HDFS user may not write there: run as one who may (HADOOP_USER_NAME under simple "
        "authentication, your Kerberos principal otherwise) or fix the directory's owner and "
        "mode (`hdfs dfs -chown`, `-chmod`), or pass another --checkpoint"),
    "StandbyException": "the NameNode is a standby: name the active one, or the nameservice",
    DATANODES_FAILED: (
        "no DataNode holding the file's blocks answered (down, or unreachable from this host): "
        "bring them back (`hdfs dfsadmin -report` lists dead ones); the checkpoint is not lost "
        "and is read again once they are. With dfs.replication 1 a single lost DataNode makes "
        "a checkpoint unreadable: keep 2 or more for checkpoints"),
}


def remote(err: BaseException) -> tuple[str, str] | None:
    """(exception class without its package, first line of its message), or None when
    ``err`` is not an error the NameNode or a DataNode returned."""
    text = str(err)
    if _DATANODES.search(text):
        nodes = sorted({f"{ip}:{port}" for ip, port in datanodes(text)})
        return DATANODES_FAILED, "all DataNodes holding the block failed" + (
            f" ({', '.join(nodes[:5])})" if nodes else "")
    match = _RPC.search(text)
    if match is None:
        return None
    message = match["msg"].split("\\n", 1)[0].split("\n", 1)[0].rstrip('")')
    return match["cls"].rsplit(".", 1)[-1], message.strip()
