"""A rank whose script is done does not wait for a tf.data iterator still being freed beside
it (TensorFlow's autotune wait, up to 60 s; rank/iterators.py): it ends as a normal exit
would, its threads joined, its atexit handlers run and its files flushed. A real
``python -m ringtrain.rank.entry`` process; a thread that never ends stands in for the free."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from ringtrain.rank import iterators

    out = sys.argv[1]
    unflushed = open(out + ".data", "w")
    unflushed.write("every byte")  # neither flushed nor closed by the script
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
