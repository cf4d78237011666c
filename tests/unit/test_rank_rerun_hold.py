"""The failed run's exception outlives the entry's ``except`` and is freed in a thread of its
own at the top of the next run: its traceback holds the old world, whose teardown (tf.data's
iterators wait for their threads) cost a survivor 4 s before it joined the new ring."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

from ringtrain.rank import rerun


class _Slow:
    """An object of the old world whose teardown takes time, and says where it ran."""

    freed_in: ClassVar[list[str]] = []

    def __del__(self) -> None:
        time.sleep(0.3)
        _Slow.freed_in.append(threading.current_thread().name)


def _fail_holding(obj: object) -> BaseException:
    try:
        held = obj  # a local of the failed frame, kept alive by the traceback
        raise RuntimeError(f"collective failed {id(held)}")
    except RuntimeError as exc:
        rerun.hold(exc)
        return exc


def test_the_old_world_is_freed_beside_the_next_run_not_in_its_way() -> None:
    _Slow.freed_in.clear()
    exc = _fail_holding(_Slow())
    del exc
    assert _Slow.freed_in == []  # held: the except's end freed nothing
    began = time.monotonic()
    rerun.release_held()
    assert time.monotonic() - began < 0.2  # the next run starts at once
    deadline = time.monotonic() + 5
    while not _Slow.freed_in and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _Slow.freed_in == ["ringtrain-old-run"]
    rerun.release_held()  # nothing held: nothing to do
