"""The commit protocol on file:// and on HDFS through hdfs-native's fsspec layer (fake namenode).

Real S3 (SeaweedFS) tests are in tests/integration/test_checkpoint_s3.py.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner
from hdfs_native.fsspec import HdfsFileSystem

import ringtrain.checkpoint.store as store_mod
from ringtrain.checkpoint import (
    CommitConflict,
    RetryPolicy,
    Store,
    collect_garbage,
    commit,
    find_latest,
    list_checkpoints,
    open_store,
)
from ringtrain.checkpoint.manifest import new_attempt
from ringtrain.cli import cli
from ringtrain.errors import CheckpointError

FAST = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.01)


def make_src(base: Path, tag: str, big: int = 100_000) -> Path:
    src = base / f"src-{tag}"
    (src / "sub").mkdir(parents=True, exist_ok=True)
    (src / "ckpt.index").write_bytes(f"index {tag}".encode())
    (src / "ckpt.data-00000-of-00001").write_bytes(os.urandom(big))
    (src / "sub" / "extra.json").write_text(json.dumps({"tag": tag}))
    return src


def same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)


@pytest.fixture
def local(tmp_path: Path) -> Store:
    return open_store(str(tmp_path / "store"), retry=FAST, chunk_bytes=16_384)


def test_commit_then_resume_returns_identical_files(tmp_path: Path, local: Store) -> None:
    src = make_src(tmp_path, "a")
    done = commit(local, src, step=23, epoch=1, meta={"loss": 0.5})
    assert done.url.endswith("/manifests/ckpt-000000000023.json")
    restored = find_latest(local, tmp_path / "restore")
    assert restored is not None and (restored.step, restored.epoch) == (23, 1)
    assert restored.manifest.meta == {"loss": 0.5}
    assert same_tree(src, restored.directory)
    assert find_latest(open_store(str(tmp_path / "empty")), tmp_path / "r2") is None


def test_newest_wins_and_keep_deletes_manifest_and_data(tmp_path: Path, local: Store) -> None:
    for step in (10, 20, 30, 40):
        done = commit(local, make_src(tmp_path, str(step)), step=step, epoch=step // 10, keep=2)
    assert done.cleanup.removed_steps == (20,)
    root = tmp_path / "store"
    assert sorted(p.name for p in (root / "manifests").iterdir()) == [
        "ckpt-000000000030.json",
        "ckpt-000000000040.json",
    ]
    attempts = sorted(p.name[:12] for p in (root / "data").iterdir())
    assert attempts == ["000000000030", "000000000040"]
    restored = find_latest(local, tmp_path / "r")
    assert restored is not None and restored.step == 40
    assert same_tree(tmp_path / "src-40", restored.directory)


def test_garbage_collection_waits_for_the_safe_age(tmp_path: Path, local: Store) -> None:
    commit(local, make_src(tmp_path, "a"), step=1, epoch=1)
    data = tmp_path / "store" / "data"
    old = new_attempt(2, datetime.now(timezone.utc) - timedelta(hours=30))
    young = new_attempt(3, datetime.now(timezone.utc) - timedelta(minutes=5))
    for name in (old, young):
        (data / name).mkdir()
        (data / name / "partial").write_bytes(b"x")
    (data / "not-ours").mkdir()
    assert collect_garbage(local) == (old,)
    left = {p.name for p in data.iterdir()}
    assert young in left and "not-ours" in left and len(left) == 3
    assert find_latest(local, tmp_path / "r") is not None  # the referenced data is untouched


def test_data_of_an_unreadable_manifest_is_never_collected(tmp_path: Path, local: Store) -> None:
    commit(local, make_src(tmp_path, "a"), step=5, epoch=1)
    (tmp_path / "store" / "manifests" / "ckpt-000000000005.json").write_text("{trunc")
    assert collect_garbage(local, safe_age_s=0) == ()
    assert len(list((tmp_path / "store" / "data").iterdir())) == 1


def test_a_second_writer_of_the_same_step_loses_and_cleans_up(tmp_path: Path, local: Store) -> None:
    first = commit(local, make_src(tmp_path, "a"), step=7, epoch=1)
    with pytest.raises(CommitConflict, match="another writer") as info:
        commit(local, make_src(tmp_path, "b"), step=7, epoch=1)
    assert "own URL" in info.value.hint
    data = [p.name for p in (tmp_path / "store" / "data").iterdir()]
    assert data == [first.manifest.data.split("/")[1]]
    restored = find_latest(local, tmp_path / "r")
    assert restored is not None and same_tree(tmp_path / "src-a", restored.directory)


def test_a_retried_create_that_had_succeeded_is_our_commit(
    tmp_path: Path, local: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store_mod.create_exclusive
    calls: list[bool] = []

    def lost_answer(fs: Any, protocol: str, path: str, data: bytes) -> bool:
        created = real(fs, protocol, path, data)
        calls.append(created)
        if len(calls) == 1:
            raise ConnectionResetError(errno.ECONNRESET, "reply lost")
        return created

    monkeypatch.setattr(store_mod, "create_exclusive", lost_answer)
    done = commit(local, make_src(tmp_path, "a"), step=3, epoch=1)
    assert calls == [True, False]  # created, then "exists" on retry: recognised as ours
    assert find_latest(local, tmp_path / "r").manifest == done.manifest  # type: ignore[union-attr]


def test_a_failed_upload_never_makes_a_checkpoint_visible(tmp_path: Path, local: Store) -> None:
    commit(local, make_src(tmp_path, "a"), step=1, epoch=1)

    def refuse() -> None:
        raise CheckpointError("injected: storage refused the upload", "none")

    deny_second_put = at_put(2, refuse)

    with pytest.raises(CheckpointError, match="injected"):
        commit(local.with_hook(deny_second_put), make_src(tmp_path, "b"), step=2, epoch=2)
    root = tmp_path / "store"
    assert [p.name for p in (root / "manifests").iterdir()] == ["ckpt-000000000001.json"]
    assert len(list((root / "data").iterdir())) == 1  # the abandoned attempt was removed
    restored = find_latest(local, tmp_path / "r")
    assert restored is not None and restored.step == 1


def test_transient_errors_inside_an_upload_are_retried(tmp_path: Path, local: Store) -> None:
    failures = iter([ConnectionResetError(errno.ECONNRESET, "reset"), TimeoutError("slow")])

    def flaky(phase: str, op: str, rel: str) -> None:
        if phase == "chunk":
            err = next(failures, None)
            if err is not None:
                raise err

    done = commit(local.with_hook(flaky), make_src(tmp_path, "a"), step=1, epoch=1)
    assert list_checkpoints(local, deep=True)[0].ok
    assert done.manifest.step == 1


def test_permanent_errors_are_not_retried_and_say_how_to_fix(tmp_path: Path) -> None:
    attempts: list[str] = []

    def denied(phase: str, op: str, rel: str) -> None:
        if phase == "chunk":
            attempts.append(rel)
            raise PermissionError(errno.EACCES, "Access Denied")

    store = open_store(str(tmp_path / "s"), retry=FAST, hook=denied)
    with pytest.raises(CheckpointError, match=r"put .* failed: PermissionError") as info:
        commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    assert len(attempts) == 1
    assert "credentials" in info.value.hint


def two_commits_second_corrupted(store: Store, tmp_path: Path) -> None:
    """Steps 1 and 2 committed from sources ``a`` and ``b``; then one byte of step 2's data
    file changed in place (same size, other bytes: only sha256 can tell)."""
    commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
    second = commit(store, make_src(tmp_path, "b"), step=2, epoch=2)
    key = f"{second.manifest.data}/ckpt.data-00000-of-00001"
    local_copy = tmp_path / "obj"
    local_copy.write_bytes(store.read_bytes(key))
    corrupt_one_byte(local_copy)
    if store.location.protocol == "hdfs":
        store.remove(key)  # HDFS files are written once
    store.put_file(key, local_copy)


def at_put(n: int, action: Callable[[], object]) -> Callable[[str, str, str], None]:
    """A store hook that runs ``action`` just before the ``n``-th upload (a fault mid-commit)."""
    puts: list[str] = []

    def hook(phase: str, op: str, rel: str) -> None:
        if phase == "before" and op == "put":
            puts.append(rel)
            if len(puts) == n:
                action()

    return hook


def corrupt_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corruption_fails_verify_and_resume_falls_back(tmp_path: Path, local: Store) -> None:
    commit(local, make_src(tmp_path, "a"), step=1, epoch=1)
    second = commit(local, make_src(tmp_path, "b"), step=2, epoch=2)
    target = tmp_path / "store" / second.manifest.data / "ckpt.data-00000-of-00001"
    corrupt_one_byte(target)
    cheap = list_checkpoints(local)
    assert [c.ok for c in cheap] == [True, True]  # same size: only hashing can tell
    deep = list_checkpoints(local, deep=True)
    assert [c.ok for c in deep] == [False, True]
    assert "sha256" in deep[0].problems[0] and "ckpt.data" in deep[0].problems[0]
    restored = find_latest(local, tmp_path / "r")
    assert restored is not None and restored.step == 1
    assert "ckpt-000000000002.json" in restored.skipped[0]
    assert same_tree(tmp_path / "src-a", restored.directory)
    assert not any(p.name.startswith(".fetch") for p in (tmp_path / "r").iterdir())


def test_a_corrupt_newest_checkpoint_never_blocks_the_next_save_at_its_step(
    tmp_path: Path, local: Store
) -> None:
    """Resume skipped a corrupt step-2 checkpoint and went back to step 1; training reaches
    step 2 again: its commit replaces the corrupt one (it used to fail 'committed by another
    writer first'). An unreadable manifest is replaced the same way."""
    commit(local, make_src(tmp_path, "a"), step=1, epoch=1)
    bad = commit(local, make_src(tmp_path, "b"), step=2, epoch=2)
    corrupt_one_byte(tmp_path / "store" / bad.manifest.data / "ckpt.data-00000-of-00001")
    assert find_latest(local, tmp_path / "r1").step == 1  # type: ignore[union-attr]
    again = commit(local, make_src(tmp_path, "c"), step=2, epoch=2)
    assert again.manifest.data != bad.manifest.data
    restored = find_latest(local, tmp_path / "r2")
    assert restored is not None and restored.step == 2 and not restored.skipped
    assert same_tree(tmp_path / "src-c", restored.directory)
    (tmp_path / "store" / "manifests" / "ckpt-000000000003.json").write_text("{not json")
    commit(local, make_src(tmp_path, "d"), step=3, epoch=3)
    restored = find_latest(local, tmp_path / "r3")
    assert restored is not None and restored.step == 3


def test_truncated_or_missing_files_show_in_a_cheap_listing(tmp_path: Path, local: Store) -> None:
    done = commit(local, make_src(tmp_path, "a"), step=1, epoch=1)
    data = tmp_path / "store" / done.manifest.data
    (data / "sub" / "extra.json").unlink()
    with open(data / "ckpt.index", "r+b") as f:
        f.truncate(3)
    (item,) = list_checkpoints(local)
    assert not item.ok
    assert sorted(item.problems) == [
        "ckpt.index: 3 bytes, manifest says 7",
        "sub/extra.json: missing",
    ]
    assert find_latest(local, tmp_path / "r") is None


# -- HDFS through hdfs-native's own fsspec class, with an in-process fake namenode -----------


@dataclass
class FakeStatus:
    path: str
    length: int
    isdir: bool
    permission: int = 0o644
    owner: str = "u"
    group: str = "g"
    modification_time: int = 0
    access_time: int = 0


class FakeNamenode:
    """The few hdfs_native.Client calls hdfs_native.fsspec makes, backed by a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.renames: list[tuple[str, str, bool]] = []

    def _local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def _status(self, path: str) -> FakeStatus:
        p = self._local(path)
        if not p.exists():
            raise FileNotFoundError(path)
        return FakeStatus(path, 0 if p.is_dir() else p.stat().st_size, p.is_dir())

    def get_file_info(self, path: str) -> FakeStatus:
        return self._status(path)

    def list_status(self, path: str, recursive: bool = False) -> Iterator[FakeStatus]:
        p = self._local(path)
        if not p.is_dir():
            raise FileNotFoundError(path)
        return iter([self._status(posixpath.join(path, c.name)) for c in sorted(p.iterdir())])

    def read(self, path: str) -> Any:
        return open(self._local(path), "rb")

    def create(self, path: str, write_options: Any = None) -> Any:
        p = self._local(path)
        p.parent.mkdir(parents=True, exist_ok=True)  # HDFS creates parents
        if p.exists() and not getattr(write_options, "overwrite", True):
            raise FileExistsError(path)
        return open(p, "wb")

    def mkdirs(self, path: str, permission: int = 0o755, create_parent: bool = False) -> None:
        self._local(path).mkdir(parents=create_parent, exist_ok=True)

    def rename(self, src: str, dst: str, overwrite: bool = False) -> None:
        self.renames.append((src, dst, overwrite))
        if self._local(dst).exists() and not overwrite:
            raise FileExistsError(dst)  # like the NameNode's FileAlreadyExistsException
        os.replace(self._local(src), self._local(dst))

    def delete(self, path: str, recursive: bool = False) -> bool:
        p = self._local(path)
        if not p.exists():
            return False
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        return True


@pytest.fixture
def hdfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNamenode]:
    namenode = FakeNamenode(tmp_path / "hdfs")
    namenode.root.mkdir()

    class FakeHdfs(HdfsFileSystem):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.client = namenode

    assert fsspec.get_filesystem_class("hdfs") is HdfsFileSystem  # hdfs-native's entry point
    fsspec.register_implementation("hdfs", FakeHdfs, clobber=True)
    try:
        yield namenode
    finally:
        fsspec.register_implementation("hdfs", HdfsFileSystem, clobber=True)


def test_hdfs_commit_resume_retention_and_conflict(tmp_path: Path, hdfs: FakeNamenode) -> None:
    store = open_store("hdfs://localhost:8020/user/ml/run1", retry=FAST, chunk_bytes=16_384)
    assert type(store.fs).__mro__[1] is HdfsFileSystem
    for step in (1, 2, 3):
        commit(store, make_src(tmp_path, str(step)), step=step, epoch=step, keep=2)
    manifests = sorted(p.name for p in (hdfs.root / "user/ml/run1/manifests").iterdir())
    assert manifests == ["ckpt-000000000002.json", "ckpt-000000000003.json"]
    # the commit point is a rename that refuses to overwrite
    assert all(not overwrite for _, dst, overwrite in hdfs.renames)
    assert all(dst.startswith("/user/ml/run1/manifests/ckpt-") for _, dst, _ in hdfs.renames)
    with pytest.raises(CommitConflict):
        commit(store, make_src(tmp_path, "x"), step=3, epoch=3)
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and restored.step == 3
    assert same_tree(tmp_path / "src-3", restored.directory)
    assert [c.ok for c in list_checkpoints(store, deep=True)] == [True, True]
    assert not [p for p in (hdfs.root / "user/ml/run1/manifests").iterdir() if ".tmp" in p.name]


# -- CLI ----------------------------------------------------------------------------------


def test_ckpt_ls_and_verify(tmp_path: Path, local: Store) -> None:
    commit(local, make_src(tmp_path, "a"), step=23, epoch=1)
    second = commit(local, make_src(tmp_path, "b"), step=46, epoch=2)
    url = str(tmp_path / "store")
    runner = CliRunner()
    ls = runner.invoke(cli, ["ckpt", "ls", url])
    assert ls.exit_code == 0, ls.output
    assert "46" in ls.output and "23" in ls.output and "resume: step 46 (epoch 2)" in ls.output
    ok = runner.invoke(cli, ["ckpt", "verify", url])
    assert ok.exit_code == 0, ok.output
    corrupt_one_byte(tmp_path / "store" / second.manifest.data / "ckpt.data-00000-of-00001")
    bad = runner.invoke(cli, ["ckpt", "verify", url])
    assert bad.exit_code == 6
    assert "1 of 2 checkpoints" in bad.output and "BROKEN" in bad.output
    assert "resume: step 23 (epoch 1)" in bad.output
    as_json = json.loads(runner.invoke(cli, ["ckpt", "ls", url, "--json"]).output)
    assert [c["step"] for c in as_json["checkpoints"]] == [46, 23]
    empty = runner.invoke(cli, ["ckpt", "verify", str(tmp_path / "nothing")])
    assert empty.exit_code == 6 and "no checkpoints" in empty.output


def test_tensorboard_command_serves_the_run_logdir(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "20260101-000000-aaaa" / "tensorboard").mkdir(parents=True)
    (runs / "20260102-000000-bbbb" / "tensorboard").mkdir(parents=True)
    (runs / "20260103-000000-cccc" / "attempt-1").mkdir(parents=True)
    (runs / "bench-20260104-000000-dddd").mkdir(parents=True)  # not a launch run: ignored
    runner = CliRunner()
    args = ["tensorboard", "--runs-dir", str(runs), "--print-command", "--port", "6123"]
    out = runner.invoke(cli, [*args, "20260101-000000-aaaa"])
    assert out.exit_code == 0, out.output
    cmd = out.output.split()
    assert cmd[0].endswith("tensorboard")
    assert cmd[1:] == ["--logdir", str(runs / "20260101-000000-aaaa" / "tensorboard"), "--host",
                       "127.0.0.1", "--port", "6123"]
    by_path = runner.invoke(cli, [*args, str(runs / "20260102-000000-bbbb")])
    assert str(runs / "20260102-000000-bbbb" / "tensorboard") in by_path.output
    latest = runner.invoke(cli, [*args, "latest"])  # the newest run has no logs
    assert latest.exit_code == 2 and "wrote no TensorBoard logs" in latest.output
    missing = runner.invoke(cli, [*args, "nope"])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output


def test_runs_shows_the_checkpoint_result_json_recorded_on_any_storage(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    s3_run = runs / "20260101-000000-aaaa"
    (s3_run / "attempt-1").mkdir(parents=True)
    (s3_run / "result.json").write_text(json.dumps({
        "state": "succeeded", "exit_code": 0, "duration_s": 12.5, "attempts": [{}],
        "last_checkpoint": {"url": "s3://ckpt/run1", "step": 138, "epoch": 6, "name": "x"}}))
    local_run = runs / "20260102-000000-bbbb"  # launcher killed: no result.json
    (local_run / "attempt-1").mkdir(parents=True)
    (local_run / "checkpoints" / "manifests").mkdir(parents=True)
    (local_run / "checkpoints" / "manifests" / "ckpt-000000000023.json").write_text("{}")
    out = CliRunner().invoke(cli, ["runs", "--runs-dir", str(runs), "--json"])
    assert out.exit_code == 0, out.output
    by_id = {r["run_id"]: r["last_checkpoint"] for r in json.loads(out.output)}
    assert by_id == {"20260101-000000-aaaa": "step 138 (epoch 6) at s3://ckpt/run1",
                     "20260102-000000-bbbb": "ckpt-000000000023"}


def test_hostile_manifests_and_linked_data_fall_back_to_the_previous_checkpoint(
    tmp_path: Path, local: Store
) -> None:
    """Issue 23: a deeply nested manifest raised RecursionError on resume, symlinked data was
    followed, and manifest text was rendered as markup by ckpt ls. Each is now a named
    problem of that checkpoint, and resume takes the previous one."""
    commit(local, make_src(tmp_path, "a"), step=10, epoch=1)
    newer = commit(local, make_src(tmp_path, "b"), step=20, epoch=2)
    root = Path(local.abspath(""))
    manifest = root / "manifests" / "ckpt-000000000030.json"
    manifest.write_text("[" * 200_000 + "]" * 200_000)  # nested past the parser's stack
    secret = tmp_path / "someone-elses-file"
    secret.write_bytes(b"x" * 100_000)
    data = root / newer.manifest.data / "ckpt.data-00000-of-00001"
    data.unlink()
    data.symlink_to(secret)
    listed = {item.step: item for item in list_checkpoints(local)}
    assert "nested too deeply" in listed[30].problems[0]
    assert any("symbolic link" in p for p in listed[20].problems)
    restored = find_latest(local, tmp_path / "restore")
    assert restored is not None and restored.step == 10
    body = json.loads((root / "manifests" / "ckpt-000000000010.json").read_text())
    body["created"] = "[bold red]\x1b[2Jhacked[/]"
    (root / "manifests" / "ckpt-000000000010.json").write_text(json.dumps(body))
    shown = CliRunner().invoke(cli, ["ckpt", "ls", str(root)])
    assert "[bold red]" in shown.output and "\x1b" not in shown.output


def test_a_storage_call_past_its_deadline_is_a_transient_timeout() -> None:
    import threading
    import time as _time

    from ringtrain.checkpoint.retry import is_transient
    from ringtrain.checkpoint.store import with_deadline

    assert with_deadline(lambda: 7, 1.0)() == 7
    release = threading.Event()
    started = _time.monotonic()
    with pytest.raises(TimeoutError, match="no answer in 0 s") as info:
        with_deadline(lambda: release.wait(30), 0.2)()
    release.set()
    assert _time.monotonic() - started < 5 and is_transient(info.value)

    def fails() -> None:
        raise PermissionError("denied")

    with pytest.raises(PermissionError, match="denied"):
        with_deadline(fails, 1.0)()


def test_a_planted_huge_manifest_is_refused_unread(tmp_path: Path, local: Store) -> None:
    """Issue 40 item 5: the 16 MiB cap applied after the whole file was read (a 1 GiB sparse
    manifest cost rank 0 1 GiB). Now at most cap + 1 bytes are read, then refused."""
    import tracemalloc

    from ringtrain.checkpoint.catalog import load_manifest, manifest_rel
    from ringtrain.checkpoint.manifest import MAX_MANIFEST_BYTES

    commit(local, make_src(tmp_path, "a"), step=1, epoch=0, keep=3)
    name = "000000000002.json"
    path = tmp_path / "store" / manifest_rel(name)
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk, 1 GiB to whoever reads it whole
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=f"over {MAX_MANIFEST_BYTES} bytes"):
            load_manifest(local, name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_MANIFEST_BYTES  # the cap's order, never the file's
    exact = local.read_bytes(manifest_rel(name), limit=10)
    assert exact == b"\0" * 11
