"""rank/warm.py: a host's warm slots are ready once their abstract sockets are bound (after
the imports), read from /proc/net/unix: the launcher waits for that before it offers a rested
host back to Horovod's driver."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

from ringtrain.rank import envvars, warm
from ringtrain.rank.warmstand import address

TABLE = """Num       RefCount Protocol Flags    Type St Inode Path
00000000d0c731c7: 00000002 00000000 00010000 0001 01 9678255 @ringtrain-warm-0-r1-0
00000000d0c731c8: 00000002 00000000 00010000 0001 01 9678256 @ringtrain-warm-0-r1-1
00000000d0c731c9: 00000002 00000000 00010000 0001 01 9678257 @ringtrain-warm-0-r12-2
00000000d0c731ca: 00000002 00000000 00010000 0001 01 9678258 @ringtrain-warm-1000-r1-3
00000000d0c731cb: 00000002 00000000 00010000 0001 01 9678259 @ringtrain-warm-0-r1-x
00000000d0c731cc: 00000003 00000000 00000000 0001 03 9678260 /run/systemd/notify
00000000d0c731cd: 00000002 00000000 00010000 0001 01 9678261
00000000d0c731ce: 00000003 00000000 00000000 0001 03 9678262 @ringtrain-warm-0-r1-5
"""


def test_only_this_users_listening_slots_of_this_run_count() -> None:
    assert warm.bound_slots(TABLE, "r1", 0) == {0, 1}  # slot 5's is an accepted connection
    assert warm.bound_slots(TABLE, "r1", 1000) == {3}
    assert warm.bound_slots(TABLE, "r12", 0) == {2}
    assert warm.bound_slots("", "r1", 0) == set()


def test_await_slots_returns_once_every_slot_listens() -> None:
    run_id = f"t{os.getpid()}"
    held: list[socket.socket] = []

    def bind_later() -> None:
        for slot in range(2):
            time.sleep(0.3)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(address(run_id, slot))
            sock.listen(1)
            held.append(sock)

    binder = threading.Thread(target=bind_later)
    binder.start()
    try:
        assert not warm.await_slots(run_id, 2, timeout=0.2)  # not yet
        assert warm.await_slots(run_id, 2, timeout=10)
        env = {**os.environ, envvars.RUN_ID: run_id}
        ready = subprocess.run([sys.executable, "-m", "ringtrain.rank.warm", run_id,
                                "--await-slots", "2", "--timeout", "5"], env=env,
                               capture_output=True, timeout=30, check=False)
        assert ready.returncode == 0, ready.stderr
        missing = subprocess.run([sys.executable, "-m", "ringtrain.rank.warm", run_id,
                                  "--await-slots", "3", "--timeout", "0.5"], env=env,
                                 capture_output=True, timeout=30, check=False)
        assert missing.returncode == 1, missing.stderr
    finally:
        binder.join()
        for sock in held:
            sock.close()
