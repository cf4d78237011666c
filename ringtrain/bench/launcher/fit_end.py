"""Benchmark: the end of a long ``fit``, with ringtrain.keras' ``FreeAtTrainEnd`` and without.

TensorFlow 2.15 frees ``fit``'s tf.data iterator as ``fit`` returns, and that free can wait
out the iterator's autotune period, 60 s after a few minutes of training
(``ringtrain.rank.iterators``). Each process here trains a small model for ``--seconds``
under ``python -m ringtrain.rank.entry`` (as a rank runs), half of them with the callback and
half without (plain Keras, the anchor), all at once on the same cores, and reports how long
after ``on_train_end`` ``fit`` returned and the process ended.

    python -m ringtrain.bench.launcher.fit_end [--seconds 150] [--procs 3] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WORKER = textwrap.dedent("""
    import json, os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    from ringtrain.keras.fitend import FreeAtTrainEnd

    seconds, free = float(sys.argv[1]), sys.argv[2] == "free"
    x = tf.random.uniform((2000, 64))
    y = tf.random.uniform((2000,), maxval=10, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(2000).batch(32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer="adam")
    seen = {}

    class Pace(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.02)  # a step's all-reduce, roughly

        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = time.time() - began > seconds

        def on_train_end(self, logs=None):
            seen["end"] = time.time()

    began = time.time()
    tf.get_logger().setLevel("ERROR")
    model.fit(data, steps_per_epoch=100, epochs=10**6, verbose=0,
              callbacks=[Pace()] + ([FreeAtTrainEnd()] if free else []))
    seen["returned"] = time.time()
    print(json.dumps(seen), flush=True)
""")


def _one_round(script: Path, seconds: float, procs: int) -> list[dict[str, float | str]]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    kinds = ["free", "plain"] * procs
    running = [(kind, subprocess.Popen(
        [sys.executable, "-m", "ringtrain.rank.entry", str(script), str(seconds), kind],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env))
        for kind in kinds]
    rows: list[dict[str, float | str]] = []
    pending = list(running)
    ended: dict[int, float] = {}
    while pending:  # the time each process ends, as it ends
        for kind, proc in list(pending):
            if proc.poll() is not None:
                ended[proc.pid] = time.time()
                pending.remove((kind, proc))
        time.sleep(0.05)
    for kind, proc in running:
        out = proc.stdout.read() if proc.stdout else ""
        seen = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 else {}
        if not seen:
            rows.append({"kind": kind, "failed": f"exit {proc.returncode}"})
            continue
        rows.append({"kind": kind, "returned_s": seen["returned"] - seen["end"],
                     "exited_s": ended[proc.pid] - seen["end"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0,
                        help="how long each process trains (the period reaches 60 s after "
                             "about two minutes)")
    parser.add_argument("--procs", type=int, default=3, help="processes of each kind")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(prefix="ringtrain-fit-end-") as tmp:
        script = Path(tmp) / "fit.py"
        script.write_text(WORKER)
        for n in range(args.rounds):
            print(f"round {n + 1}/{args.rounds}: {2 * args.procs} processes, "
                  f"{args.seconds:.0f} s of fit each ...", flush=True)
            rows += _one_round(script, args.seconds, args.procs)
    print(f"\n{'':<26}{'fit returned (s)':>24}{'process ended (s)':>24}   after on_train_end")
    for kind, label in (("free", "with FreeAtTrainEnd"), ("plain", "plain Keras (anchor)")):
        mine = [r for r in rows if r["kind"] == kind and "failed" not in r]
        failed = [r for r in rows if r["kind"] == kind and "failed" in r]
        ret = sorted(float(r["returned_s"]) for r in mine)
        ext = sorted(float(r["exited_s"]) for r in mine)
        if not mine:
            print(f"{label:<26}{'every process failed':>48}")
            continue
        print(f"{label:<26}{_spread(ret):>24}{_spread(ext):>24}"
              + (f"   ({len(failed)} failed)" if failed else ""))
        print(f"{'':<26}fit returned, each:  {' '.join(f'{v:.1f}' for v in ret)}")
        print(f"{'':<26}process ended, each: {' '.join(f'{v:.1f}' for v in ext)}")
    return 0


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}, max {max(values):.2f}"


if __name__ == "__main__":
    sys.exit(main())
