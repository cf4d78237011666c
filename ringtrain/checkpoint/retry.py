"""Retry transient storage errors with capped exponential backoff.

Transient: connection refused/reset, timeouts, 5xx and throttling (s3fs turns those into
``OSError`` with EBUSY/EREMOTEIO/EIO), botocore/aiohttp transport errors. Permanent: missing
objects, permission and signature errors, exists, disk full, bad arguments. A permanent error
is raised at once; a transient one after ``attempts`` tries.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ringtrain.checkpoint import hdfs_errors

log = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,
        errno.EIO,
        errno.EREMOTEIO,
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EPIPE,
    }
)
_PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
# Transport errors of botocore/aiohttp, matched by class name so that this module needs neither.
_TRANSIENT_CLASS_NAMES = frozenset(
    {
        "HTTPClientError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientPayloadError",
        "IncompleteReadError",
        "ResponseStreamingError",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all; waits ``initial_s * factor**i`` capped at ``max_s``, +-jitter."""

    attempts: int = 5
    initial_s: float = 0.5
    factor: float = 2.0
    max_s: float = 8.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        base = min(self.max_s, self.initial_s * self.factor**attempt)
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))  # noqa: S311


def describe(err: BaseException) -> str:
    """An error in one line: its type and text; the NameNode's exception without its stack."""
    hdfs = hdfs_errors.remote(err)
    if hdfs is not None:
        return f"{hdfs[0]}: {hdfs[1][:300]}"
    text = str(err).strip() or "no details"
    return f"{type(err).__name__}: {text[:300]}"


def is_transient(err: BaseException) -> bool:
    """True when retrying the same request may succeed."""
    if isinstance(err, _PERMANENT_TYPES):
        return False
    if isinstance(err, (TimeoutError, ConnectionError)):
        return True
    hdfs = hdfs_errors.remote(err)
    if hdfs is not None:
        return hdfs[0] in hdfs_errors.TRANSIENT
    if any(cls.__name__ in _TRANSIENT_CLASS_NAMES for cls in type(err).__mro__):
        return True
    if isinstance(err, OSError):
        return err.errno in _TRANSIENT_ERRNOS or (err.errno is None and not err.args[1:])
    cause = err.__cause__
    return cause is not None and cause is not err and is_transient(cause)


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn`` until it succeeds, a permanent error occurs, or the attempts are used up."""
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as err:
            if not is_transient(err) or attempt + 1 >= policy.attempts:
                raise
            wait = policy.delay(attempt)
            log.warning(
                "%s failed (%s); retry %d/%d in %.1f s",
                what,
                describe(err),
                attempt + 1,
                policy.attempts - 1,
                wait,
            )
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
