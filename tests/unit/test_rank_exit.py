"""A rank whose script is done does not wait for a tf.data iterator still being freed beside
it (TensorFlow's autotune wait, up to 60 s; rank/iterators.py): it does what a normal exit
would for the script (rank/quickexit.py): its threads joined (a thread pool's idle workers
told to stop first), its atexit handlers run, its files closed (a gzip stream's trailer
written). A real ``python -m ringtrain.rank.entry`` process; a thread that never ends stands
in for the free."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, gzip, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from ringtrain.rank import iterators

    out = sys.argv[1]
    unflushed = open(out + ".data", "w")
    unflushed.write("every byte")  # neither flushed nor closed by the script
    packed = gzip.open(out + ".gz", "wt")
    packed.write("whole")  # its trailer is written at close only
    pool = ThreadPoolExecutor(2)  # idle workers (not daemons) until told at exit to stop
    assert pool.submit(lambda: 1).result() == 1
    atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
    never = threading.Event()
    free = threading.Thread(target=never.wait, daemon=True)  # the free that waits 60 s
    free.start()
    iterators._THREADS.append(free)
    threading.Thread(target=lambda: (time.sleep(0.5),
                                     open(out + ".worker", "w").write("joined"))).start()
    print("trained", flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)
""")


@pytest.mark.parametrize("ending", ["return", "exit"])
def test_a_done_rank_ends_without_waiting_for_an_iterator_free(tmp_path: Path,
                                                               ending: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGTRAIN_")}
    done = subprocess.run([sys.executable, "-m", "ringtrain.rank.entry", str(script), str(out),
                           ending], env=env, capture_output=True, text=True, timeout=40,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained\n"
    assert (tmp_path / "out.data").read_text() == "every byte"
    assert (tmp_path / "out.atexit").read_text() == "ran"
    assert (tmp_path / "out.worker").read_text() == "joined"  # the script's thread joined
    with gzip.open(tmp_path / "out.gz", "rt") as packed:  # closed, trailer and all
        assert packed.read() == "whole"
