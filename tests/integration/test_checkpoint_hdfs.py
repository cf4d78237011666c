"""Checkpoints on a real HDFS: Apache Hadoop's MiniDFSCluster (a NameNode and a DataNode in one
JVM, ringtrain.sim.minihdfs), started once for this module on 127.0.0.1. The client is
hdfs-native (no JVM), as in production. The same protocol tests as on S3: commit, resume,
retention, two writers racing, a corrupted file caught by ``ckpt verify``; and HDFS's own
faults: the NameNode stopped mid-commit and back, safe mode, a space quota.

To run them against another cluster instead (simple authentication, a directory you may
write): ``RINGTRAIN_TEST_HDFS_URL=hdfs://namenode:8020/tmp/ringtrain`` (the fault tests then
need the minicluster and are skipped).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ringtrain.checkpoint import (
    CommitConflict,
    Committed,
    RetryPolicy,
    Store,
    commit,
    find_latest,
    list_checkpoints,
    open_store,
)
from ringtrain.checkpoint.store import StorageError
from ringtrain.sim import minihdfs
from tests.unit.test_checkpoint_store import (
    at_put,
    make_src,
    same_tree,
    two_commits_second_corrupted,
)

pytestmark = pytest.mark.slow
RINGTRAIN = [sys.executable, "-m", "ringtrain"]
FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.05, max_s=0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[minihdfs.MiniHdfs | None]:
    if os.environ.get("RINGTRAIN_TEST_HDFS_URL"):
        yield None
        return
    started = minihdfs.start(tmp_path_factory.mktemp("hdfs"))
    try:
        yield started
    finally:
        started.stop()
        assert started.proc.poll() is not None


@pytest.fixture
def hdfs_url(cluster: minihdfs.MiniHdfs | None) -> str:
    """A fresh directory for one test."""
    base = os.environ.get("RINGTRAIN_TEST_HDFS_URL") or (cluster.url if cluster else "")
    return f"{base.rstrip('/')}/t-{secrets.token_hex(4)}"


@pytest.fixture
def mini(cluster: minihdfs.MiniHdfs | None) -> minihdfs.MiniHdfs:
    if cluster is None:
        pytest.skip("faults need the minicluster (RINGTRAIN_TEST_HDFS_URL is set)")
    return cluster


def _store(url: str, **kwargs: object) -> Store:
    kwargs.setdefault("retry", FAST_RETRY)
    return open_store(url, **kwargs)  # type: ignore[arg-type]


def test_commit_resume_and_retention_on_hdfs(tmp_path: Path, hdfs_url: str) -> None:
    store = _store(hdfs_url)
    for step in (1, 2, 3):
        commit(store, make_src(tmp_path, str(step)), step=step, epoch=step, keep=2)
    with pytest.raises(CommitConflict):  # exclusive create of the manifest
        commit(store, make_src(tmp_path, "x"), step=3, epoch=3)
    assert [c.step for c in list_checkpoints(store, deep=True) if c.ok] == [3, 2]
    assert sorted(e.name[:12] for e in store.list_dir("data")) == ["000000000002",
                                                                   "000000000003"]
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and restored.step == 3
    assert same_tree(tmp_path / "src-3", restored.directory)


def _race(url: str, sources: dict[str, Path]) -> dict[str, object]:
    """Both commit step 5 to ``url`` at once; what each got."""
    outcomes: dict[str, object] = {}
    go = threading.Barrier(len(sources))

    def write(tag: str, src: Path) -> None:
        go.wait()
        try:
            outcomes[tag] = commit(_store(url), src, step=5, epoch=1)
        except CommitConflict as err:
            outcomes[tag] = err

    threads = [threading.Thread(target=write, args=(t, s)) for t, s in sources.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


def test_two_writers_of_one_step_exactly_one_wins(tmp_path: Path, hdfs_url: str) -> None:
    for round_ in range(3):
        url = f"{hdfs_url}/race{round_}"
        sources = {t: make_src(tmp_path, f"{round_}{t}") for t in "AB"}
        outcomes = _race(url, sources)
        winners = [k for k, v in outcomes.items() if isinstance(v, Committed)]
        losers = [v for v in outcomes.values() if isinstance(v, CommitConflict)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        store = _store(url)
        restored = find_latest(store, tmp_path / f"r{round_}")
        assert restored is not None and same_tree(sources[winners[0]], restored.directory)
        assert len(store.list_dir("data")) == 1  # the loser removed its attempt


def test_corrupted_file_fails_verify_and_resume_falls_back(tmp_path: Path, hdfs_url: str) -> None:
    store = _store(hdfs_url)
    two_commits_second_corrupted(store, tmp_path)
    verify = subprocess.run([*RINGTRAIN, "ckpt", "verify", hdfs_url], capture_output=True,
                            text=True, timeout=120, check=False)
    assert verify.returncode == 6, verify.stdout + verify.stderr
    assert "1 of 2 checkpoints" in verify.stderr and "sha256" in verify.stdout
    listed = subprocess.run([*RINGTRAIN, "ckpt", "ls", hdfs_url], capture_output=True,
                            text=True, timeout=120, check=False)
    # ls checks sizes only (same size, other bytes): it lists both; verify read every byte
    assert listed.returncode == 0 and "resume: step 2" in listed.stdout, listed.stderr
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and restored.step == 1
    assert same_tree(tmp_path / "src-a", restored.directory)


def test_namenode_down_mid_commit_fails_clearly_and_the_last_checkpoint_survives(
    tmp_path: Path, hdfs_url: str, mini: minihdfs.MiniHdfs
) -> None:
    store = _store(hdfs_url, call_timeout_s=3)  # hdfs-native waits for ever on its own
    commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    outage_at_second_put = at_put(2, lambda: mini.command("stop-namenode"))

    started = time.monotonic()
    try:
        with pytest.raises(StorageError) as info:
            commit(store.with_hook(outage_at_second_put), make_src(tmp_path, "b"), step=2,
                   epoch=2)
    finally:
        failed_after = time.monotonic() - started
        mini.command("start-namenode")
    assert failed_after < 60, failed_after  # 3 tries of 3 s, not for ever
    assert info.value.transient, info.value.message
    assert "no answer in 3 s" in info.value.message, info.value.message
    assert f"put {hdfs_url}/data/" in info.value.message
    assert "previous checkpoint is intact" in info.value.hint
    store = _store(hdfs_url, retry=RetryPolicy(attempts=8, initial_s=0.5, max_s=2))
    assert [(c.step, c.ok) for c in list_checkpoints(store, deep=True)] == [(1, True)]
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and same_tree(tmp_path / "src-a", restored.directory)


def test_safe_mode_refuses_the_commit_and_names_the_url(
    tmp_path: Path, hdfs_url: str, mini: minihdfs.MiniHdfs
) -> None:
    store = _store(hdfs_url)
    commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    mini.command("safemode enter")
    try:
        with pytest.raises(StorageError) as info:
            commit(store, make_src(tmp_path, "b"), step=2, epoch=2)
    finally:
        mini.command("safemode leave")
    assert hdfs_url in info.value.message and "safe mode" in info.value.message.lower(), (
        info.value.message)
    commit(store, make_src(tmp_path, "b"), step=2, epoch=2)  # out of safe mode: fine again
    assert [c.step for c in list_checkpoints(store) if c.ok] == [2, 1]


def test_a_full_space_quota_fails_the_commit_and_keeps_the_last_one(
    tmp_path: Path, hdfs_url: str, mini: minihdfs.MiniHdfs
) -> None:
    store = _store(hdfs_url)
    commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    path = hdfs_url.split("://", 1)[1].split("/", 1)[1]
    mini.command(f"space-quota /{path} 1")  # HDFS counts a whole block: nothing more fits
    with pytest.raises(StorageError) as info:
        commit(store, make_src(tmp_path, "b"), step=2, epoch=2)
    assert hdfs_url in info.value.message and "quota" in info.value.message.lower(), (
        info.value.message)
    assert [(c.step, c.ok) for c in list_checkpoints(store, deep=True)] == [(1, True)]


def test_ckpt_ls_of_an_unknown_namenode_is_a_clear_error() -> None:
    proc = subprocess.run([*RINGTRAIN, "ckpt", "ls", "hdfs://nohost.invalid:8020/x"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "hdfs://nohost.invalid:8020/x" in proc.stderr, proc.stderr



def test_a_user_without_write_access_gets_a_clear_refusal(
    tmp_path: Path, hdfs_url: str, mini: minihdfs.MiniHdfs
) -> None:
    """Simple authentication: the client is whoever HADOOP_USER_NAME names. bob may not write
    in alice's 755 directory; ``ckpt ls`` by bob still reads it."""
    path = "/" + hdfs_url.split("://", 1)[1].split("/", 1)[1]
    mini.command(f"owned {path} alice 755")
    src = make_src(tmp_path, "a")
    code = ("import sys; from pathlib import Path; from ringtrain.checkpoint import commit, "
            "open_store, RetryPolicy\n"
            "from ringtrain.errors import CheckpointError\n"
            "try:\n"
            f"    commit(open_store({hdfs_url!r}, retry=RetryPolicy(attempts=1)), "
            f"Path({str(src)!r}), step=1, epoch=1)\n"
            "except CheckpointError as err:\n"
            "    print(err.message); print(err.hint); sys.exit(3)\n")
    env = {**os.environ, "HADOOP_USER_NAME": "bob"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "AccessControlException: Permission denied: user=bob, access=WRITE" in proc.stdout
    assert hdfs_url in proc.stdout and "HADOOP_USER_NAME" in proc.stdout
    listed = subprocess.run([*RINGTRAIN, "ckpt", "ls", hdfs_url], env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert listed.returncode == 0 and "no checkpoint" in (listed.stdout + listed.stderr).lower(), (
        listed.stdout + listed.stderr)


def test_ckpt_bench_times_each_size_on_local_disk_and_hdfs(tmp_path: Path) -> None:
    """Issue 26, item 5: `ringtrain ckpt bench` measures HDFS beside the others, per size (its
    own temporary minicluster; S3 left out here to keep the test short)."""
    proc = subprocess.run([*RINGTRAIN, "ckpt", "bench", "--no-s3", "--size-mb", "2,1",
                           "--repeats", "1", "--files", "2"], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("│") for line in proc.stdout.splitlines() if "│" in line]
    cells = [[c.strip() for c in row if c.strip()] for row in rows]
    found = [(c[0], c[1]) for c in cells if c and c[0] in ("local disk",
                                                           "hdfs (MiniDFSCluster, 127.0.0.1)")]
    assert found == [("local disk", "1"), ("hdfs (MiniDFSCluster, 127.0.0.1)", "1"),
                     ("local disk", "2"), ("hdfs (MiniDFSCluster, 127.0.0.1)", "2")]
    assert all(float(c[3]) > 0 and float(c[5]) > 0 for c in cells if c and c[1] in ("1", "2"))


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Callable[[int], minihdfs.MiniHdfs]]:
    """A minicluster of N DataNodes for one test (the module's one keeps its DataNode)."""
    started: list[minihdfs.MiniHdfs] = []

    def start(datanodes: int) -> minihdfs.MiniHdfs:
        started.append(minihdfs.start(tmp_path / f"hdfs-{len(started)}", datanodes=datanodes))
        return started[-1]

    yield start
    for cluster in started:
        cluster.stop()


def _replication(mini: minihdfs.MiniHdfs, path: str) -> set[int]:
    """Each file's replication under ``path``, as the NameNode records it."""
    import hdfs_native

    listed = hdfs_native.Client(mini.url).list_status(path, recursive=True)
    return {f.replication for f in listed if not f.isdir}


def test_a_lost_datanode_holding_the_only_copy_stops_resume_until_it_is_back(
    tmp_path: Path, own_cluster: Callable[[int], minihdfs.MiniHdfs]
) -> None:
    """Replication 1: the DataNode that holds a checkpoint's only copy is down. Resume must not
    start from scratch (training would then commit over the checkpoints and retention delete
    them): it fails, names the DataNode and the fix, and reads the checkpoint once it is back."""
    mini = own_cluster(1)
    url = f"{mini.url}/ckpt"
    store = _store(url)
    commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    commit(store, make_src(tmp_path, "b"), step=2, epoch=2)
    assert _replication(mini, "/ckpt") == {1}
    mini.command("stop-datanode 0")
    with pytest.raises(StorageError) as info:
        find_latest(store, tmp_path / "r")
    assert info.value.transient
    assert "DataNodesFailed: all DataNodes holding the block failed (127.0.0.1:" in (
        info.value.message), info.value.message
    assert url in info.value.message
    assert "the checkpoint is not lost" in info.value.hint and "dfs.replication" in info.value.hint
    assert not list((tmp_path / "r").glob("ckpt-*"))
    mini.command("restart-datanodes")
    restored = find_latest(_store(url, retry=RetryPolicy(attempts=10, initial_s=0.5, max_s=2)),
                           tmp_path / "r")
    assert restored is not None and restored.step == 2
    assert same_tree(tmp_path / "src-b", restored.directory)


def test_a_lost_datanode_with_replication_2_is_read_around(
    tmp_path: Path, own_cluster: Callable[[int], minihdfs.MiniHdfs]
) -> None:
    """Replication 2 on two DataNodes: with either one down the checkpoint reads from the
    other copy, and `ckpt verify` passes."""
    mini = own_cluster(2)
    url = f"{mini.url}/ckpt"
    commit(_store(url), make_src(tmp_path, "a"), step=1, epoch=1)
    assert _replication(mini, "/ckpt") == {2}
    mini.command("stop-datanode 0")
    restored = find_latest(_store(url), tmp_path / "r")
    assert restored is not None and restored.step == 1
    assert same_tree(tmp_path / "src-a", restored.directory)
    verify = subprocess.run([*RINGTRAIN, "ckpt", "verify", url], capture_output=True, text=True,
                            timeout=120, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_checkpoint_url_that_cannot_work_refuses_the_launch_before_any_rank(
        tmp_path: Path) -> None:
    """Issue 26, tried as a new user: `launch --checkpoint hdfs://nohost/x` trained, then every
    rank failed on the URL. The launcher now tries it once, before the probe and the ranks."""
    digits = Path(__file__).parents[2] / "ringtrain" / "models" / "digits.py"
    proc = subprocess.run([*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "-H",
                           "localhost:1", "--checkpoint", "hdfs://nohost/x", str(digits)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: hdfs://nohost/x: no NameNode for 'nohost'" in proc.stderr, proc.stderr
    assert "fix: add the NameNode's RPC port" in proc.stderr
    assert "ringtrain check:" not in proc.stdout + proc.stderr  # refused before the probe
    assert not list((tmp_path / "runs").glob("*/attempt-*"))  # no rank started
