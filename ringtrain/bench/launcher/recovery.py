"""Recovery benchmark (issue 24): after a rank is killed, how soon the job trains again and
how much work it redoes, for each way back, against ``horovodrun --elastic`` in the same run.

On a simulated cluster (root needed) the same tf.keras script (RECOVERY_SCRIPT: a small model,
a fixed pause per batch) runs once per mode and world size (``--ranks``: one rank per host,
3 by default); rank 0 prints the wall time and global step of every batch. After
``--kill-at`` batches one rank is killed (SIGKILL) at T0: the one on the last host, then, repeat
after repeat, the one on the host before it (so Horovod's rank 0 is hit too). Modes, each
launched from the first host as horovodrun is run from a node, with the defaults a user gets:

  restart     ringtrain launch --max-restarts 1 --min-np 2: every rank starts cold and resumes
              from the newest checkpoint (ringtrain.keras, one per epoch)
  elastic     ringtrain launch --elastic --min-np 2, the script written with hvd.elastic.run
              (Horovod's elastic example): the survivors roll back to their last in-memory
              commit (every --commit batches) and go on
  memory      ringtrain launch --elastic --min-np 2, the script written from Horovod's plain
              recipe with the three ringtrain.keras lines: the survivors run it again in their
              processes and resume from the newest in-memory commit (ringtrain.keras.memory)
  horovodrun  horovodrun --gloo --elastic --min-np 2, a discovery script listing the same hosts
              and an ssh that reads the cluster's ssh config: the anchor

Per mode: TTTA (the first batch of the smaller world minus T0), how many resets the fault
cost (the most any survivor went through: one is the goal), the launcher's ledger for
ringtrain's --elastic (seconds after the loss when the first survivor reset, the new ring
formed and rank 0 restored the state), steps redone (the last step before T0 minus the step
training resumed from), the effective training time ratio (the batches' own time,
steady-state batch time x batches trained, over the wall time, as in arXiv 2410.21680), the
final accuracy on held-out data, and the exit status.

    python -m ringtrain.bench.launcher.recovery [--modes restart,elastic,memory,horovodrun]
    ... --ranks 3,8 --repeats 5    (5 kills at each world size)
    ... --gloo-timeout-seconds 5   (every mode: how long survivors wait on a lost peer)
    ringtrain bench recovery --repeats 2
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ringtrain import sim
from ringtrain.bench.launcher.recovery_stages import stage_table
from ringtrain.launch.plan.launchers import ssh_shim

MODES = ("restart", "elastic", "memory", "horovodrun")

# the training loop both the recovery benchmark and the campaign run (a script of each
# defines model, data, EPOCHS, SPE, COMMIT, PAUSE and STYLE before it): the step lines
# rank 0 prints, and the recovery under hvd.elastic.run or the three ringtrain.keras lines
TRAINING_LOOP = """\
class Steps(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(PAUSE)
        if hvd.rank() == 0:
            print(f"STEP {time.time():.3f} {self.epoch * SPE + batch + 1} {hvd.size()}",
                  flush=True)


if os.environ.get("HOROVOD_ELASTIC") == "1" and STYLE == "hvd":
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def rescale():
        tf.keras.backend.set_value(model.optimizer.lr, 0.001 * hvd.size())

    state.register_reset_callbacks([rescale])
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state), Steps()]

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=SPE, epochs=EPOCHS, initial_epoch=state.epoch,
                  callbacks=callbacks, verbose=0)

    train(state)
else:
    import ringtrain.keras as rt
    start = rt.resume(model)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), Steps(),
                 *rt.callbacks(batch_size=32, commit_every=COMMIT)]
    model.fit(data, steps_per_epoch=SPE, epochs=EPOCHS, initial_epoch=start,
              callbacks=callbacks, verbose=0)
"""

RECOVERY_SCRIPT = """\
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()
EPOCHS, SPE, COMMIT = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
PAUSE, STYLE = float(sys.argv[3]), sys.argv[5]  # STYLE: hvd (hvd.elastic.run) or rt
rng = np.random.default_rng(1234)
x = rng.random((4096, 14, 14, 1), dtype=np.float32)
y = (x.reshape(4096, -1).sum(axis=1) > 98).astype(np.int64)
data = tf.data.Dataset.from_tensor_slices((x[:3584], y[:3584])).repeat().shuffle(
    1000, seed=hvd.rank()).batch(32)
model = tf.keras.Sequential([
    tf.keras.layers.Input(shape=(14, 14, 1)),
    tf.keras.layers.Conv2D(8, [3, 3], activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(16, activation="relu"),
    tf.keras.layers.Dense(2, activation="softmax"),
])
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"],
              optimizer=hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size())),
              experimental_run_tf_function=False)


""" + TRAINING_LOOP + """\
accuracy = model.evaluate(x[3584:], y[3584:], verbose=0)[1]
if hvd.rank() == 0:
    print("RESULT " + json.dumps({"accuracy": accuracy, "size": hvd.size()}), flush=True)
"""


@dataclass(frozen=True, slots=True)
class Step:
    at: float  # wall clock
    step: int  # global step, 1-based
    size: int  # ranks in the world


STAGES = ("reset", "ring formed", "restored")  # the ledger's, seconds after the loss


@dataclass(frozen=True, slots=True)
class Outcome:
    mode: str
    ttta_s: float | None
    redone: int | None
    ettr: float | None
    accuracy: float | None
    exit_code: int
    wall_s: float
    ranks: int = 3
    killed: str = ""  # the host whose rank was killed
    resets: int | None = None  # the most resets any survivor went through (ringtrain's lines)
    stages: tuple[float | None, ...] = ()  # STAGES, from the launcher's ledger

    def row(self) -> str:
        def fmt(value: float | None, spec: str) -> str:
            return "-" if value is None else format(value, spec)
        stages = (*self.stages, *(None,) * len(STAGES))[:len(STAGES)]
        return (f"{self.mode:11s} {self.ranks:5d} {self.killed:>9s} {fmt(self.ttta_s, '8.1f')} "
                f"{fmt(self.resets, '6d')} "
                + " ".join(fmt(v, "7.1f") for v in stages)
                + f" {fmt(self.redone, '8d')} {fmt(self.ettr, '7.2f')} "
                f"{fmt(self.accuracy, '9.3f')} {self.wall_s:8.1f} {self.exit_code:5d}")


HEADER = (f"{'mode':11s} {'ranks':>5s} {'killed':>9s} {'TTTA s':>8s} {'resets':>6s} "
          f"{'reset':>7s} {'formed':>7s} {'restore':>7s} {'redone':>8s} {'ETTR':>7s} "
          f"{'accuracy':>9s} {'wall s':>8s} {'exit':>5s}")
_RESET = re.compile(r"forming the ring again .*\(reset (\d+),")


def count_resets(lines: list[str]) -> int | None:
    """The most resets any survivor said it went through (``ringtrain.keras``'s line); None
    when no survivor said so (a restart, or a script with ``hvd.elastic.run``). Pure."""
    found = [int(m[1]) for line in lines if (m := _RESET.search(line))]
    return max(found) if found else None


def ledger_stages(runs: Path) -> tuple[float | None, ...]:
    """The first absorbed loss's STAGES from the run's result.json (ringtrain --elastic)."""
    for result in sorted(runs.glob("*/result.json")):
        try:
            attempts = json.loads(result.read_text()).get("attempts") or []
            stages = attempts[0]["absorbed"][0]["stages_s"]
        except (OSError, ValueError, LookupError, TypeError, AttributeError):
            continue
        return tuple(stages.get(k) for k in STAGES)
    return ()


def parse_steps(lines: list[str]) -> list[Step]:
    """The ``STEP <time> <step> <size>`` lines rank 0 printed (a launcher's ``[0]`` tag or
    none in front)."""
    out = []
    for line in lines:
        _, found, rest = line.partition("STEP ")
        fields = rest.split()
        if found and len(fields) == 3:
            try:
                out.append(Step(float(fields[0]), int(fields[1]), int(fields[2])))
            except ValueError:
                continue
    return out


def analyse(mode: str, steps: list[Step], t0: float, launched: float, ended: float,
            total_steps: int, accuracy: float | None, exit_code: int) -> Outcome:
    """One run's figures from its step lines. Pure."""
    before = [s for s in steps if s.at <= t0]
    first = steps[0].size if steps else 0
    after = [s for s in steps if s.at > t0 and s.size < first]
    ttta = after[0].at - t0 if after else None
    # the old world's last batch (some may finish after the kill) less the one resumed from
    old = [s for s in steps if s.size == first and (not after or s.at < after[0].at)]
    redone = old[-1].step - (after[0].step - 1) if old and after else None
    gaps = [b.at - a.at for a, b in itertools.pairwise(before) if b.step == a.step + 1]
    ettr = (total_steps * statistics.median(gaps) / (ended - launched)
            if gaps and ended > launched else None)
    return Outcome(mode, ttta, redone, ettr, accuracy, exit_code, ended - launched)


def _argv(mode: str, cluster: sim.SimCluster, work: Path, script: Path,
          args: list[str], gloo_timeout: int | None = None, hosts: int = 3,
          extra: tuple[str, ...] = (), restarts: int = 1) -> list[str]:
    """The launch command of one mode on the cluster's first ``hosts`` hosts (the anchor's
    come from the discovery script ``_prepare`` wrote); ``extra`` goes to the launcher."""
    names = cluster.names[:hosts]
    timeout = ["--gloo-timeout-seconds", str(gloo_timeout)] if gloo_timeout else []
    if mode == "horovodrun":
        horovodrun = str(Path(sys.executable).parent / "horovodrun")
        return [horovodrun, "-np", str(hosts), "--min-np", "2", "--max-np", str(hosts),
                "--host-discovery-script", str(work / "discover.sh"), "--network-interface",
                "eth0", "--gloo", *timeout, *extra, sys.executable, str(script), *args, "hvd"]
    how = ["--max-restarts", str(restarts), "--min-np", "2"] if mode == "restart" else [
        "--elastic", "--min-np", "2"]
    return [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(work / "runs"), "-H",
            ",".join(f"{h}:1" for h in names), "--ssh-config", str(cluster.ssh_config),
            "--known-hosts", str(cluster.known_hosts), *how, *timeout, *extra, str(script),
            *args, "hvd" if mode == "elastic" else "rt"]


def _prepare(cluster: sim.SimCluster, work: Path, hosts: int = 3) -> str:
    """The anchor's discovery script (the first ``hosts`` hosts) and its ssh: ringtrain's
    shim (launchers.ssh_shim: the cluster's ssh config, which horovodrun cannot take);
    returns the PATH its command runs with."""
    discover = work / "discover.sh"
    discover.write_text("#!/bin/sh\n" + "".join(f"echo {h}:1\n" for h in cluster.names[:hosts]))
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(ssh_shim(shutil.which("ssh") or "/usr/bin/ssh",
                                          cluster.ssh_config))
    for path in (discover, bin_dir / "ssh"):
        path.chmod(0o700)
    return f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def run_one(mode: str, cluster: sim.SimCluster, work: Path, opts: dict[str, float],
            ranks: int = 3, victim: int = 2) -> Outcome:
    """One launch of ``mode`` with ``ranks`` ranks on as many hosts; the rank on host number
    ``victim`` (0-based) is killed."""
    work.mkdir(parents=True)
    script = work / "train.py"
    script.write_text(RECOVERY_SCRIPT)
    epochs, spe = int(opts["epochs"]), int(opts["steps_per_epoch"])
    args = [str(epochs), str(spe), str(opts["pause"]), str(int(opts["commit"]))]
    path = _prepare(cluster, work, ranks)
    env = f"PATH={shlex.quote(path)} " if mode == "horovodrun" else ""  # its ssh: the config
    command = f"cd {shlex.quote(str(work))} && {env}" + shlex.join(
        _argv(mode, cluster, work, script, args, int(opts.get("gloo_timeout") or 0) or None,
              hosts=ranks))
    lines: list[str] = []
    launched = time.time()
    first, victim_host = cluster.names[0], cluster.names[victim]
    proc = subprocess.Popen(cluster.ssh_argv(first, command), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    t0 = 0.0
    try:
        deadline = time.monotonic() + 300
        while len(parse_steps(lines)) < opts["kill_at"]:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{mode}: no training under way:\n{''.join(lines[-30:])}")
            time.sleep(0.05)
        victims = rank_pids(cluster, victim_host, script)
        if not victims:
            sys.exit(f"{mode}: no rank process found on {victim_host}")
        t0 = time.time()
        os.kill(victims[0], signal.SIGKILL)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    ended = time.time()
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in lines if "RESULT " in line]
    accuracy = float(results[-1]["accuracy"]) if results else None
    out = analyse(mode, parse_steps(lines), t0, launched, ended, epochs * spe, accuracy,
                  proc.returncode)
    return replace(out, ranks=ranks, killed=victim_host.rsplit("-", 1)[-1],
                   resets=count_resets(lines), stages=ledger_stages(work / "runs"))


def rank_pids(cluster: sim.SimCluster, host: str, script: Path) -> list[int]:
    """The rank processes on ``host`` that run ``script``, lowest first: ringtrain's rank entry
    or the anchor's ``python script``; not the launcher, horovodrun or ringtrain's driver in
    its place, whose commands name the script too (the first host runs them)."""
    entry = f"{sys.executable} -m ringtrain.rank.entry"
    ranks = (f"{entry} {script}", f"{entry} --mpi {script}", f"{sys.executable} {script}")
    return sorted(pid for pid, cmd in sim.host_processes(cluster.config, host)
                  if cmd.startswith(ranks))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ranks", default="3", help="world sizes, one rank per host: 3,8")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps-per-epoch", type=int, default=16)
    p.add_argument("--pause", type=float, default=0.1, help="seconds each batch sleeps")
    p.add_argument("--commit", type=int, default=4, help="elastic: batches per commit")
    p.add_argument("--kill-at", type=int, default=40, help="batches before the kill")
    p.add_argument("--gloo-timeout-seconds", type=int, default=0,
                   help="every mode's Gloo timeout (0: Horovod's 30 s)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="keep every run's logs (rank logs, events.log, result.json) in DIR, a "
                        "new or empty folder; by default they go to a temporary one, deleted")
    args = p.parse_args(argv)
    if args.keep is not None and args.keep.exists() and (
            not args.keep.is_dir() or any(args.keep.iterdir())):
        sys.exit(f"--keep {args.keep}: not a new or empty folder; name another")
    opts = {"epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
            "pause": args.pause, "commit": args.commit, "kill_at": args.kill_at,
            "gloo_timeout": args.gloo_timeout_seconds}
    sizes = [int(n) for n in args.ranks.split(",")]
    if min(sizes) < 3:
        sys.exit("--ranks: at least 3 (--min-np 2 must hold after a loss)")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(str(args.keep)) if args.keep is not None
          else tempfile.TemporaryDirectory(prefix="rt-recovery-bench-")) as tmp:
        cluster = sim.up(sim.SimConfig(name="rbench", hosts=max(sizes),
                                       state_dir=Path(tmp) / "sim"))
        print(HEADER, flush=True)
        outcomes: list[Outcome] = []
        try:
            for ranks in sizes:
                for i in range(args.repeats):
                    victim = (ranks - 1 - i) % ranks  # the last host, then the one before
                    for mode in args.modes.split(","):
                        work = Path(tmp) / f"{mode}-{ranks}-{i}"
                        outcomes.append(run_one(mode, cluster, work, opts, ranks, victim))
                        print(outcomes[-1].row(), flush=True)
        finally:
            sim.down(cluster.config, purge=True)
    print("\n".join(stage_table(outcomes)))
    if args.keep is not None:
        print(f"\nEach run's logs: {args.keep}/MODE-RANKS-I/runs/")
    print(f"\nOne rank per simulated host, {args.epochs} epochs of {args.steps_per_epoch} "
          f"batches ({args.pause:g} s pause each); one rank killed after {args.kill_at} "
          "batches. TTTA: from the kill to the first batch of the smaller world; resets: the "
          "most any survivor went through; reset/formed/restore: the launcher's ledger, "
          "seconds after it named the loss (ringtrain --elastic only); redone: batches "
          "trained again; ETTR: batch time x batches / wall time. restart checkpoints once "
          f"per epoch; elastic modes commit every {args.commit} batches. Defaults "
          "throughout" + (f", but a Gloo timeout of {args.gloo_timeout_seconds} s"
                          if args.gloo_timeout_seconds else "") + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
