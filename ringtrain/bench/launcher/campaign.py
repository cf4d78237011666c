"""Fault campaign (issue 24, item 6): one long run per way back, with a fault at a fixed
interval, and what each fault cost.

On a simulated 4-host cluster (root needed) the recovery benchmark's tf.keras script
(``recovery.RECOVERY_SCRIPT``) trains 3 ranks on the first 3 hosts. Once it is under way, a
fault is injected every ``--interval`` seconds on a host other than the first (the launcher and
rank 0 live there), cycling through the kinds:

  kill    kill -9 of the rank's processes on the host
  link    the host's link goes down for ``--link-down`` seconds, then comes back
  stall   the rank's processes are stopped (SIGSTOP) for ``--stall`` seconds: a straggler

Modes: restart (ringtrain --max-restarts), elastic (hvd.elastic.run), memory (the three
ringtrain.keras lines under --elastic), spare (memory with the fourth host as a warm spare),
cold-spare (the same, --cold-spares),
horovodrun (horovodrun --elastic with a discovery script of the same 3 hosts: the anchor),
clean (memory without faults: the accuracy and ETTR a fault-free run gets). Every elastic mode
and the anchor get the same Gloo timeout and the same blacklist cooldown range.

Per mode: median TTTA by kind, median "whole" (from a kill or a link fault to the first batch
of the full world again), the most batches trained again for one fault, joins (a host
back or a spare in), the effective training time ratio (arXiv 2410.21680), final accuracy,
wall time, exit status ("hang": no end within the deadline). ``--out DIR`` keeps campaign.json
(every incident) and campaign.png.

    python -m ringtrain.bench.launcher.campaign --incidents 10 --interval 60
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ringtrain import sim
from ringtrain.bench.launcher import campaign_figures as figures
from ringtrain.bench.launcher.recovery import (
    RECOVERY_SCRIPT,
    _argv,
    _prepare,
    parse_steps,
    rank_pids,
)

MODES = ("restart", "elastic", "memory", "spare", "cold-spare", "horovodrun", "clean")
KINDS = ("kill", "link", "stall")


class Injector:
    """Injects the faults and undoes the temporary ones (links, stops), also on the way out."""

    def __init__(self, cluster: sim.SimCluster, script: Path, link_down: float,
                 stall: float) -> None:
        self.cluster, self.script = cluster, script
        self.link_down, self.stall = link_down, stall
        self.timers: list[threading.Timer] = []
        self.down: set[str] = set()
        self.stopped: set[tuple[str, int]] = set()

    def victim(self, turn: int) -> tuple[str, list[int]] | None:
        """A host other than the first with a rank running, taken in turn: its rank's
        processes, and the warm process that may be running that rank (a spare's)."""
        hosts = [h for h in self.cluster.names[1:] if h not in self.down]
        for host in hosts[turn % len(hosts):] + hosts[:turn % len(hosts)]:
            pids = rank_pids(self.cluster, host, self.script)
            if pids:
                warm = [pid for pid, cmd in sim.host_processes(self.cluster.config, host)
                        if "ringtrain.rank.warm" in cmd]
                return host, pids + warm
        return None

    def inject(self, kind: str, host: str, pids: list[int]) -> None:
        if kind == "kill":
            for pid in pids:
                _signal(pid, signal.SIGKILL)
        elif kind == "link":
            sim.set_link(self.cluster.config, host, up=False)
            self.down.add(host)
            self._later(self.link_down, self._link_up, host)
        else:
            for pid in pids:
                _signal(pid, signal.SIGSTOP)
                self.stopped.add((host, pid))
            self._later(self.stall, self._resume, host, pids)

    def _later(self, delay: float, fn: object, *args: object) -> None:
        timer = threading.Timer(delay, fn, args)  # type: ignore[arg-type]
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def _link_up(self, host: str) -> None:
        sim.set_link(self.cluster.config, host, up=True)
        self.down.discard(host)

    def _resume(self, host: str, pids: list[int]) -> None:
        for pid in pids:
            _signal(pid, signal.SIGCONT)
            self.stopped.discard((host, pid))

    def undo(self) -> None:
        for timer in self.timers:
            timer.cancel()
        for host in list(self.down):
            self._link_up(host)
        for host, pid in list(self.stopped):
            self._resume(host, [pid])


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _command(mode: str, cluster: sim.SimCluster, work: Path, opts: argparse.Namespace) -> str:
    script = work / "train.py"
    script.write_text(RECOVERY_SCRIPT)
    args = [str(opts.epochs), str(opts.steps_per_epoch), str(opts.pause), str(opts.commit)]
    path = _prepare(cluster, work)
    cooldown = ("--blacklist-cooldown-range", str(opts.cooldown[0]), str(opts.cooldown[1]))
    fallback = ("--max-restarts", str(opts.fallback_restarts)) if opts.fallback_restarts else ()
    extra: tuple[str, ...] = (*cooldown, *fallback)
    if mode == "restart":
        extra = ()
    elif mode in ("spare", "cold-spare"):
        extra = (*cooldown, *fallback, "--spares", "1",
                 *(("--cold-spares",) if mode == "cold-spare" else ()))
    # recovery._argv's modes; memory, the spares and clean launch as memory does
    launcher = mode if mode in ("horovodrun", "elastic", "restart") else "memory"
    argv = _argv(launcher, cluster, work, script, args, opts.gloo_timeout_seconds,
                 hosts=4 if "spare" in mode else 3, extra=extra, restarts=opts.incidents + 2)
    env = f"PATH={shlex.quote(path)} " if mode == "horovodrun" else ""
    return f"cd {shlex.quote(str(work))} && {env}" + shlex.join(argv)


def run_mode(mode: str, cluster: sim.SimCluster, work: Path,
             opts: argparse.Namespace) -> figures.Summary:
    work.mkdir(parents=True)
    command = _command(mode, cluster, work, opts)
    injector = Injector(cluster, work / "train.py", opts.link_down, opts.stall)
    lines: list[str] = []
    faults: list[figures.Fault] = []
    launched = time.time()
    proc = subprocess.Popen(cluster.ssh_argv(cluster.names[0], command),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    exit_code: int | None = None
    try:
        deadline = time.monotonic() + 300
        while not parse_steps(lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{mode}: no training under way:\n{''.join(lines[-30:])}")
            time.sleep(0.1)
        start = time.monotonic() + opts.warmup
        kinds = itertools.cycle(KINDS)
        for turn in range(0 if mode == "clean" else opts.incidents):
            while time.monotonic() < start + turn * opts.interval and proc.poll() is None:
                time.sleep(0.05)
            if proc.poll() is not None:
                break
            kind, found = next(kinds), injector.victim(turn)
            if found is None:
                print(f"  {mode}: no rank to hit at fault {turn + 1}", flush=True)
                continue
            faults.append(figures.Fault(time.time(), kind, found[0]))
            injector.inject(kind, *found)
            print(f"  {mode}: fault {turn + 1}: {kind} on {found[0]}", flush=True)
        try:
            exit_code = proc.wait(timeout=opts.deadline)
        except subprocess.TimeoutExpired:
            exit_code = None
    finally:
        injector.undo()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    ended = time.time()
    (work / "output.log").write_text("".join(lines))
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in lines if "RESULT " in line]
    return figures.summarise(
        mode, parse_steps(lines), faults, total_steps=opts.epochs * opts.steps_per_epoch,
        wall_s=ended - launched, accuracy=float(results[-1]["accuracy"]) if results else None,
        exit_code=exit_code)


def plot(summaries: list[figures.Summary], path: Path) -> Path:
    from ringtrain.bench.figures import dress, pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in summaries:
        points = [(n, i.ttta_s) for n, i in enumerate(s.incidents, 1) if i.ttta_s is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=f"{s.mode} (ETTR "
                    f"{'-' if s.ettr is None else format(s.ettr, '.2f')})")
    ax.set_xlabel("incident")
    ax.set_ylabel("time to training again (s)")
    ax.set_yscale("log")
    ax.set_title("fault campaign: " + ", ".join(KINDS) + " in turn")
    dress(ax)
    return save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default="restart,memory,spare,horovodrun,clean")
    p.add_argument("--incidents", type=int, default=10)
    p.add_argument("--interval", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds before the first fault")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--steps-per-epoch", type=int, default=100)
    p.add_argument("--pause", type=float, default=0.1)
    p.add_argument("--commit", type=int, default=10)
    p.add_argument("--link-down", type=float, default=20.0)
    p.add_argument("--stall", type=float, default=4.0)
    p.add_argument("--gloo-timeout-seconds", type=int, default=10)
    p.add_argument("--cooldown", type=int, nargs=2, default=(10, 40), metavar=("MIN", "MAX"))
    p.add_argument("--fallback-restarts", type=int, default=0,
                   help="ringtrain's elastic modes: --max-restarts N, a restart from the last "
                   "checkpoint when the elastic job itself fails")
    p.add_argument("--deadline", type=float, default=1800.0,
                   help="seconds after the last fault before a job counts as hung")
    p.add_argument("--out", type=Path, default=None)
    opts = p.parse_args(argv)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="rt-campaign-") as tmp:
        cluster = sim.up(sim.SimConfig(name="cbench", hosts=4, state_dir=Path(tmp) / "sim"))
        try:
            for mode in opts.modes.split(","):
                summaries.append(run_mode(mode, cluster, Path(tmp) / mode, opts))
                print(figures.row(summaries[-1]), flush=True)
        finally:
            sim.down(cluster.config, purge=True)
    print("\n" + figures.HEADER)
    for s in summaries:
        print(figures.row(s))
    print(f"\n{opts.incidents} faults, one every {opts.interval:g} s ({', '.join(KINDS)} in "
          f"turn; link down {opts.link_down:g} s, stall {opts.stall:g} s); 3 ranks, "
          f"{opts.epochs} x {opts.steps_per_epoch} batches of {opts.pause:g} s pause, commits "
          f"every {opts.commit} batches, Gloo timeout {opts.gloo_timeout_seconds} s, cooldown "
          f"{opts.cooldown[0]}-{opts.cooldown[1]} s. kill/link/stall: median TTTA (s).")
    if opts.out is not None:
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "campaign.json").write_text(json.dumps(
            [figures.as_json(s) for s in summaries], indent=1))
        print(f"wrote {plot(summaries, opts.out / 'campaign.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
