"""Checkpoints against a real S3 server (SeaweedFS on 127.0.0.1) with real credentials."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ringtrain.checkpoint import (
    CommitConflict,
    Committed,
    RetryPolicy,
    StorageError,
    Store,
    commit,
    find_latest,
    list_checkpoints,
    open_store,
)
from ringtrain.errors import CheckpointError
from ringtrain.rank import procfs
from ringtrain.sim.s3server import S3Server, start_s3_server
from tests.integration import s3_fixture
from tests.integration.s3_fixture import client_env, needs_weed
from tests.unit.test_checkpoint_store import (
    at_put,
    make_src,
    same_tree,
    two_commits_second_corrupted,
)

pytestmark = [pytest.mark.s3, needs_weed]
s3_server = s3_fixture.s3_server
s3_url = s3_fixture.s3_url
s3_store = s3_fixture.s3_store
RINGTRAIN = [sys.executable, "-m", "ringtrain"]


def test_commit_resume_and_retention_on_s3(tmp_path: Path, s3_store: Callable[..., Store]) -> None:
    store = s3_store()
    for step in (1, 2, 3):
        commit(store, make_src(tmp_path, str(step)), step=step, epoch=step, keep=2)
    assert [c.step for c in list_checkpoints(store, deep=True) if c.ok] == [3, 2]
    attempts = store.list_dir("data")
    assert sorted(e.name[:12] for e in attempts) == ["000000000002", "000000000003"]
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and restored.step == 3
    assert same_tree(tmp_path / "src-3", restored.directory)


def test_starting_a_running_server_again_returns_it(s3_server: S3Server) -> None:
    again = start_s3_server(s3_server.state_dir, bucket=s3_server.bucket)
    assert (again.pid, again.endpoint_url, again.access_key, again.secret_key) == (
        s3_server.pid, s3_server.endpoint_url, s3_server.access_key, s3_server.secret_key)
    with pytest.raises(CheckpointError, match="running with bucket"):
        start_s3_server(s3_server.state_dir, bucket="other")
    assert s3_server.secret_key not in procfs.cmdline(s3_server.pid)


def test_the_server_checks_signatures(s3_server: S3Server, s3_url: str) -> None:
    wrong = {**s3_server.client_options(), "secret": "not-" + s3_server.secret_key}
    store = open_store(s3_url, options=wrong, retry=RetryPolicy(attempts=1))
    with pytest.raises(StorageError) as info:
        store.list_dir("manifests")
    assert "signature we calculated does not match" in info.value.message
    assert "credentials" in info.value.hint
    assert s3_server.secret_key not in info.value.message
    anonymous = open_store(s3_url, options={"anon": True, "endpoint_url": s3_server.endpoint_url})
    with pytest.raises(StorageError, match="PermissionError"):
        anonymous.read_bytes("manifests/x")


def test_cli_reads_credentials_from_the_environment_only(
    tmp_path: Path, s3_server: S3Server, s3_store: Callable[..., Store], s3_url: str
) -> None:
    commit(s3_store(), make_src(tmp_path, "a"), step=12, epoch=3)
    env = client_env(s3_server, dict(os.environ))
    ok = subprocess.run([*RINGTRAIN, "ckpt", "ls", s3_url], env=env, capture_output=True,
                        text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "resume: step 12 (epoch 3)" in ok.stdout
    # only the standard AWS config files, no AWS_* credentials variables
    files_only = {k: v for k, v in env.items() if k not in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_REGION")}
    ok2 = subprocess.run([*RINGTRAIN, "ckpt", "verify", s3_url], env=files_only,
                         capture_output=True, text=True, timeout=60, check=False)
    assert ok2.returncode == 0, ok2.stderr
    bad_env = {**env, "AWS_SECRET_ACCESS_KEY": "wrong-secret-value"}
    bad = subprocess.run([*RINGTRAIN, "ckpt", "ls", s3_url], env=bad_env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 6
    assert "error: list" in bad.stderr and "fix:" in bad.stderr and "credentials" in bad.stderr
    assert "wrong-secret-value" not in bad.stderr + bad.stdout
    assert s3_server.secret_key not in bad.stderr + bad.stdout + ok.stdout


def test_a_missing_bucket_is_named_not_taken_for_no_checkpoints(
    tmp_path: Path, s3_server: S3Server, s3_url: str
) -> None:
    """Issue 26, tried as a new user: `ckpt ls s3://missing-bucket/x` said "no checkpoints",
    and a launch with it trained until rank 0's first commit. A prefix with nothing in it in
    a bucket that exists is still "no checkpoints"."""
    env = client_env(s3_server, dict(os.environ))
    missing = subprocess.run([*RINGTRAIN, "ckpt", "ls", "s3://missing-bucket/x"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 6, missing.stdout + missing.stderr
    assert "there is no bucket 'missing-bucket'" in missing.stderr
    assert "fix: the bucket or directory does not exist" in missing.stderr
    empty = subprocess.run([*RINGTRAIN, "ckpt", "ls", s3_url], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    assert empty.returncode == 0 and "no checkpoints" in empty.stdout, empty.stderr
    digits = Path(__file__).parents[2] / "ringtrain" / "models" / "digits.py"
    launch = subprocess.run([*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), "-H",
                             "localhost:1", "--checkpoint", "s3://missing-bucket/x", str(digits)],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            check=False)
    assert launch.returncode != 0 and "there is no bucket 'missing-bucket'" in launch.stderr
    assert not list((tmp_path / "runs").glob("*/attempt-*"))  # refused before any rank


def _race(make_store: Callable[..., Store], url: str, sources: dict[str, Path]
          ) -> dict[str, Committed | BaseException]:
    """Two threads commit step 9 to ``url``; both reach the commit point together."""
    barrier = threading.Barrier(2, timeout=30)
    outcomes: dict[str, Committed | BaseException] = {}

    def meet_before_create(phase: str, op: str, rel: str) -> None:
        if phase == "before" and op == "create":
            barrier.wait()

    def write(tag: str) -> None:
        try:
            outcomes[tag] = commit(make_store(url, hook=meet_before_create), sources[tag],
                                   step=9, epoch=1)
        except BaseException as err:
            outcomes[tag] = err

    threads = [threading.Thread(target=write, args=(t,)) for t in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def test_two_writers_of_one_step_exactly_one_wins(
    tmp_path: Path, s3_store: Callable[..., Store]
) -> None:
    for round_ in range(4):
        url = f"{s3_store().url}/race{round_}"
        sources = {t: make_src(tmp_path, f"{round_}{t}") for t in "AB"}
        outcomes = _race(s3_store, url, sources)
        winners = [k for k, v in outcomes.items() if isinstance(v, Committed)]
        losers = [v for v in outcomes.values() if isinstance(v, CommitConflict)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        store = s3_store(url)
        restored = find_latest(store, tmp_path / f"r{round_}")
        assert restored is not None
        assert same_tree(sources[winners[0]], restored.directory)
        assert len(store.list_dir("data")) == 1  # the loser removed its attempt


def test_corrupted_object_fails_verify_and_resume_falls_back(
    tmp_path: Path, s3_server: S3Server, s3_store: Callable[..., Store], s3_url: str
) -> None:
    store = s3_store()
    two_commits_second_corrupted(store, tmp_path)
    verify = subprocess.run([*RINGTRAIN, "ckpt", "verify", s3_url],
                            env=client_env(s3_server, dict(os.environ)), capture_output=True,
                            text=True, timeout=60, check=False)
    assert verify.returncode == 6, verify.stdout + verify.stderr
    assert "1 of 2 checkpoints" in verify.stderr and "sha256" in verify.stdout
    restored = find_latest(store, tmp_path / "r")
    assert restored is not None and restored.step == 1
    assert same_tree(tmp_path / "src-a", restored.directory)


def test_s3_outage_during_commit_retries_then_fails_clearly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "s3"
    server = start_s3_server(state, bucket="ckpt")
    try:
        url = server.url("outage")
        retry = RetryPolicy(attempts=4, initial_s=0.1, factor=2, max_s=0.5)
        store = open_store(url, options=server.client_options(), retry=retry)
        commit(store, make_src(tmp_path, "a"), step=1, epoch=1)
        outage_at_second_put = at_put(2, server.kill)

        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            commit(store.with_hook(outage_at_second_put), make_src(tmp_path, "b"), step=2,
                   epoch=2)
        elapsed = time.monotonic() - started
        assert info.value.transient and "put s3://ckpt/outage/data/" in info.value.message
        assert "previous checkpoint is intact" in info.value.hint
        assert server.secret_key not in info.value.message
        retries = [r.message for r in caplog.records if r.message.startswith("put ")]
        assert len(retries) == 3 and "retry 3/3" in retries[-1], retries
        assert elapsed < 30
        before = (server.endpoint_url, server.access_key, server.secret_key)
        server = start_s3_server(state, bucket="ckpt")  # same data dir, ports and credentials
        assert (server.endpoint_url, server.access_key, server.secret_key) == before
        store = open_store(url, options=server.client_options(), retry=retry)
        assert [(c.step, c.ok) for c in list_checkpoints(store, deep=True)] == [(1, True)]
        restored = find_latest(store, tmp_path / "r")
        assert restored is not None and same_tree(tmp_path / "src-a", restored.directory)
    finally:
        server.kill()


def test_storage_that_does_not_answer_at_launch_is_a_warning_not_a_refusal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch's one try of the checkpoint URL (launch/commits.check_storage): an S3
    endpoint nobody listens on is transient, so the launch goes on with a warning (training
    rides out a short outage); a URL that cannot work raises."""
    from ringtrain.checkpoint.location import Location
    from ringtrain.errors import CheckpointError
    from ringtrain.launch.recover.commits import check_storage

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    notes: list[str] = []
    started = time.monotonic()
    check_storage(Location.parse("s3://ckpt/run"), notes.append)
    assert time.monotonic() - started < 30
    assert len(notes) == 1 and notes[0].startswith("warning: the checkpoint storage does not "
                                                   "answer now (list s3://ckpt/run/manifests")
    with pytest.raises(CheckpointError, match="no NameNode for 'nohost'"):
        check_storage(Location.parse("hdfs://nohost/x"), notes.append)
    assert len(notes) == 1
