"""kill -9 of the committing process at every storage operation of a commit, then resume.

A "zygote" child imports ringtrain once; for each kill point it forks a writer that commits a
checkpoint with a hook counting storage events (before/after every operation, and every
streamed chunk) and SIGKILLs itself at event N. The test then checks, with a fresh process
state: every visible manifest verifies (never a partial checkpoint), resume finds exactly the
last complete checkpoint with identical bytes, the next commit works and garbage collection
leaves only referenced data. Against file:// and the real S3 server; on S3 also at timed
kills that land inside HTTP requests.

By hand: ``python -m tests.integration.test_checkpoint_faults --zygote`` reads JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHUNK = 16_384


def _writer(req: dict[str, Any], events_fd: int, options: dict[str, Any] | None) -> None:
    """In the forked child: commit, logging each storage event; SIGKILL self at event N."""
    import threading

    from ringtrain.checkpoint import RetryPolicy, commit, open_store

    count = 0
    lock = threading.Lock()  # HDFS uploads a checkpoint's files in parallel

    def hook(phase: str, op: str, rel: str) -> None:
        nonlocal count
        with lock:  # the kill while holding it: no other thread logs an event after event N
            count += 1
            os.write(events_fd, f"{phase} {op} {rel}\n".encode())
            if count == req["kill_at"]:
                os.kill(os.getpid(), signal.SIGKILL)

    try:
        store = open_store(req["url"], retry=RetryPolicy(attempts=2, initial_s=0.01),
                           chunk_bytes=CHUNK, hook=hook, options=options)
        commit(store, Path(req["src"]), step=req["step"], epoch=req["step"], keep=req["keep"],
               safe_age_s=0)
    except BaseException as err:
        os.write(events_fd, f"error {type(err).__name__}: {err}\n".encode())
        os._exit(3)
    os._exit(0)


def _zygote() -> None:
    """Serve kill requests: fork a writer per request, report how it ended."""
    # imported once here, not in every writer (the package itself loads them lazily)
    import ringtrain.checkpoint.commit_protocol
    import ringtrain.checkpoint.store  # noqa: F401

    bucket = os.environ.get("ZYGOTE_S3_BUCKET")
    options = _warm_s3_session(bucket) if bucket else None
    for line in sys.stdin:
        req = json.loads(line)
        events_fd = os.open(req["events"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pid = os.fork()
        if pid == 0:
            _writer(req, events_fd, options)
        os.close(events_fd)
        if req.get("kill_after_s") is not None:
            time.sleep(req["kill_after_s"])
            os.kill(pid, signal.SIGKILL)  # our own child, by PID
        _, status = os.waitpid(pid, 0)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        sys.stdout.write(json.dumps({"signal": sig, "exit": code}) + "\n")
        sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown of the warm session


def _warm_s3_session(bucket: str) -> dict[str, Any]:
    """An aiobotocore session whose service models are loaded, shared by every forked writer.

    One request in a throwaway event loop fills the session's caches and leaves no thread
    running, so fork stays safe; a writer then starts in ~0.1 s instead of ~0.5 s.
    """
    import asyncio

    import s3fs  # noqa: F401 - imported once here, not in every writer
    from aiobotocore.session import AioSession

    session = AioSession()

    async def warm() -> None:
        async with session.create_client("s3") as client:
            await client.list_objects_v2(Bucket=bucket, MaxKeys=1)

    asyncio.run(warm())
    return {"session": session}


if __name__ == "__main__" and "--zygote" in sys.argv:
    _zygote()
    sys.exit(0)

# ---------------------------------------------------------------------------------------------

from ringtrain.checkpoint import (  # noqa: E402
    Store,
    collect_garbage,
    commit,
    find_latest,
    list_checkpoints,
    open_store,
)
from ringtrain.checkpoint.catalog import load_manifest, manifest_names  # noqa: E402
from ringtrain.checkpoint.filesystems import parse_url  # noqa: E402
from ringtrain.sim.s3server import S3Server  # noqa: E402
from tests.integration import s3_fixture  # noqa: E402
from tests.integration.s3_fixture import FAST_RETRY, client_env, needs_weed  # noqa: E402
from tests.unit.test_checkpoint_store import same_tree  # noqa: E402

pytestmark = [pytest.mark.slow]
s3_server = s3_fixture.s3_server


class Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_checkpoint_faults", "--zygote"],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def commit(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(30)


def make_payload(base: Path, tag: str) -> Path:
    """17 files like a sharded checkpoint: one spans several streamed chunks."""
    src = base / f"payload-{tag}"
    (src / "shards").mkdir(parents=True)
    (src / "ckpt.data").write_bytes(os.urandom(6 * CHUNK + 123))
    for i in range(16):
        (src / "shards" / f"s{i:02d}").write_bytes(f"{tag}-{i}".encode() * 50)
    return src


def check_after_kill(store: Store, expect_step: int, sources: dict[int, Path], scratch: Path
                     ) -> None:
    # every visible manifest complete (sizes; objects appear whole or not at all), and the
    # one resume picks verified byte for byte
    listed = list_checkpoints(store)
    assert listed and all(c.ok for c in listed), [(c.name, c.problems) for c in listed]
    restored = find_latest(store, scratch)
    assert restored is not None
    assert restored.step == expect_step, (restored.step, expect_step)
    assert same_tree(sources[restored.step], restored.directory)


def check_recovery(store: Store, src: Path, step: int) -> None:
    """The next commit works despite leftovers, and GC leaves only referenced data."""
    commit(store, src, step=step, epoch=step, keep=2)
    collect_garbage(store, safe_age_s=0)
    referenced = {load_manifest(store, n).data.split("/")[1] for _, n in manifest_names(store)}
    assert {e.name for e in store.list_dir("data")} == referenced


def run_kill_points(
    zygote: Zygote, base_url: str, store_for: Callable[[str], Store], tmp_path: Path,
    pick: Callable[[int], list[int]] = lambda total: list(range(1, total + 1)),
) -> list[str]:
    """Kill at every event of a commit of step 2 (over a committed step 1, keep=1), or at the
    events ``pick(total)`` chooses."""
    sources = {1: make_payload(tmp_path, "one"), 2: make_payload(tmp_path, "two"),
               3: make_payload(tmp_path, "three")}
    events_file = tmp_path / "events"
    dry = f"{base_url}/dry"
    commit(store_for(dry), sources[1], step=1, epoch=1)
    done = zygote.commit(url=dry, src=str(sources[2]), step=2, keep=1, kill_at=0,
                         events=str(events_file))
    total = len(events_file.read_text().splitlines())
    assert done == {"signal": None, "exit": 0} and total >= 50, (done, total)
    killed_at = []
    for n in pick(total):
        url = f"{base_url}/k{n:03d}"
        store = store_for(url)
        commit(store, sources[1], step=1, epoch=1)
        out = zygote.commit(url=url, src=str(sources[2]), step=2, keep=1, kill_at=n,
                            events=str(events_file))
        assert out["signal"] == signal.SIGKILL, (n, out, events_file.read_text()[-500:])
        events = events_file.read_text().splitlines()
        assert len(events) == n
        created = any(e.startswith("after create manifests/") for e in events)
        check_after_kill(store, 2 if created else 1, sources, tmp_path / f"r{n}")
        if n % 4 == 0 or n == total or len(killed_at) % 4 == 3:
            check_recovery(store, sources[3], 3)
        killed_at.append(events[-1])
    return killed_at


@pytest.fixture
def zygote_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


@pytest.fixture
def zygote(zygote_env: dict[str, str]) -> Iterator[Zygote]:
    z = Zygote(zygote_env)
    yield z
    z.close()


def reuse(base: Store, url: str) -> Store:
    """A Store for ``url`` sharing ``base``'s filesystem object (no new S3 session per point)."""
    return replace(base, location=parse_url(url))


def _spread(points: list[str]) -> set[str]:
    return {p.split()[0] + " " + p.split()[1] for p in points}


def test_kill_9_at_every_point_of_a_local_commit(tmp_path: Path, zygote: Zygote) -> None:
    base = open_store(str(tmp_path / "store"), retry=FAST_RETRY)
    points = run_kill_points(zygote, base.url, lambda u: reuse(base, u), tmp_path)
    assert len(points) >= 50
    # spread: inside uploads, around the commit point, inside retention and GC
    assert {"chunk put", "before create", "after create", "before delete", "before list",
            "before get"} <= _spread(points)


@pytest.mark.s3
@needs_weed
def test_kill_9_at_every_point_of_an_s3_commit(tmp_path: Path, s3_server: S3Server) -> None:
    env = client_env(s3_server, dict(os.environ))
    zygote = Zygote({**env, "ZYGOTE_S3_BUCKET": s3_server.bucket})
    base = open_store(s3_server.url("kill9"), retry=FAST_RETRY,
                      options=s3_server.client_options())
    try:

        def store_for(url: str) -> Store:
            return reuse(base, url)

        points = run_kill_points(zygote, base.url, store_for, tmp_path)
        assert len(points) >= 50
        assert {"before put", "after put", "before create", "after create", "before delete",
                "after delete"} <= _spread(points)
        _timed_kills(zygote, s3_server.url("timed"), store_for, tmp_path)
    finally:
        zygote.close()


def _timed_kills(
    zygote: Zygote, base_url: str, store_for: Callable[[str], Store], tmp_path: Path
) -> None:
    """SIGKILL after a delay: lands inside HTTP requests too. Either outcome, never partial."""
    sources = {1: tmp_path / "payload-one", 2: tmp_path / "payload-two"}
    started = time.monotonic()
    zygote.commit(url=f"{base_url}/dry", src=str(sources[2]), step=2, keep=1, kill_at=0,
                  events=str(tmp_path / "ev"))
    full = time.monotonic() - started
    outcomes = set()
    # spread over the dry run's duration, plus one at once: a loaded machine can make the dry
    # run slow and the others fast, and the kill-before-the-commit-point case must be seen
    delays = [1e-4] + [full * (i + 0.5) / 8 for i in range(8)]
    for i, delay in enumerate(delays):
        url = f"{base_url}/t{i:02d}"
        store = store_for(url)
        commit(store, sources[1], step=1, epoch=1)
        out = zygote.commit(url=url, src=str(sources[2]), step=2, keep=1, kill_at=0,
                            kill_after_s=delay, events=str(tmp_path / "ev"))
        listed = list_checkpoints(store)
        assert listed and all(c.ok for c in listed)
        restored = find_latest(store, tmp_path / f"t{i}")
        assert restored is not None and restored.step in (1, 2)
        assert same_tree(sources[restored.step], restored.directory)
        outcomes.add((out["signal"], restored.step))
    assert (signal.SIGKILL, 1) in outcomes  # most kills land before the commit point


@pytest.mark.slow
def test_kill_9_at_points_of_an_hdfs_commit(tmp_path: Path, zygote: Zygote) -> None:
    """The same on a real HDFS (MiniDFSCluster). Its data files go up in parallel, so which
    operation event N lands on varies from run to run; whichever it is, no partial checkpoint
    is ever visible. Every tenth event of the uploads, the three at the commit point (the
    manifest's creation), then the first of each kind and every fourth (retention, garbage
    collection), to keep the test under a minute; file:// and S3 above are killed at every
    event."""
    from ringtrain.sim import minihdfs

    mini = minihdfs.start(tmp_path / "hdfs")
    try:
        base = open_store(f"{mini.url}/kill9", retry=FAST_RETRY)

        def pick(total: int) -> list[int]:
            events = (tmp_path / "events").read_text().splitlines()
            point = next(i for i, e in enumerate(events, 1) if e.startswith("before create m"))
            firsts = {}  # after the commit point, the first event of each kind
            for i, e in enumerate(events[point - 1:], point):
                firsts.setdefault(" ".join(e.split()[:2]), i)
            return sorted({*range(1, point, 10), *range(point, point + 3), *firsts.values(),
                           *range(point + 3, total + 1, 4), total})

        points = run_kill_points(zygote, base.url, lambda u: reuse(base, u), tmp_path, pick)
        assert len(points) >= 12
        assert {"before create", "after create", "before delete"} <= _spread(points)
        assert {"before put", "after put", "chunk put"} & _spread(points)
    finally:
        mini.stop()
