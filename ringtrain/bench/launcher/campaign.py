"""Fault campaign (issue 24, item 6): one long run per way back, with a fault at a fixed
interval, and what each fault cost.

On a simulated 4-host cluster (root needed) the digits CNN (``campaign_task.CAMPAIGN_SCRIPT``:
a task whose fault-free accuracy is stable) trains 3 ranks on the first 3 hosts. Once it is
under way, a fault is injected every ``--intervals`` seconds until the job ends (each rate a
run of its own; ``--incidents N``: at most N) on a host other than the first (the launcher
and rank 0 live there), cycling through the kinds:

  kill    kill -9 of the rank's processes on the host
  link    the host's link goes down for ``--link-down`` seconds, then comes back
  stall   the rank's processes are stopped (SIGSTOP) for ``--stall`` seconds: a straggler

Modes: restart (ringtrain --max-restarts), elastic (hvd.elastic.run), memory (the three
ringtrain.keras lines under --elastic), spare (memory with the fourth host as a warm spare),
cold-spare (the same, --cold-spares),
horovodrun (horovodrun --elastic with a discovery script of the same 3 hosts: the anchor),
clean (memory without faults, run once: the accuracy and ETTR a fault-free run of the same task
gets). Every elastic mode and the anchor get the same Gloo timeout (by default none: each
launcher's own, as a user meets it) and the same blacklist cooldown range;
``--fallback-restarts`` goes to ringtrain's elastic modes only (horovodrun has no such option).

One table per rate; per mode: the median time back by kind (from the fault to training again
at the rate before it), the wall time lost to the faults, to start-up and end, and to
neither, which add up to wall x (1 - ETTR) (campaign_figures says how), the final accuracy
and its difference in points from the clean run's, wall time, exit status ("hang": no end
within the deadline). ``--out DIR`` keeps campaign.json (every incident, every step line) and
campaign.png.

    python -m ringtrain.bench.launcher.campaign --intervals 60,30
    python -m ringtrain.bench.launcher.campaign --figures out/campaign.json clean/campaign.json
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
from ringtrain.bench.launcher.campaign_task import CAMPAIGN_SCRIPT
from ringtrain.bench.launcher.recovery import Step, _argv, _prepare, parse_steps, rank_pids

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


def _stalled(lines: list[str], deadline: float) -> bool:
    """No step line for ``deadline`` seconds: the job is hung, the faults stop. (The last
    step line only: this runs every half second while the job trains.)"""
    last = next((steps for line in reversed(lines) if (steps := parse_steps([line]))), [])
    return bool(last) and time.time() - last[-1].at > deadline


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def launcher_options(mode: str, cooldown: tuple[int, int], fallback_restarts: int,
                     ) -> tuple[str, ...]:
    """The options ``mode`` adds to its launcher's command: each launcher only its own. PURE.
    The anchor, horovodrun --elastic, gets the cooldown range (its own option) and nothing of
    ringtrain's (it refuses --max-restarts); restart has its own --max-restarts."""
    if mode == "restart":
        return ()
    ranges = ("--blacklist-cooldown-range", str(cooldown[0]), str(cooldown[1]))
    if mode == "horovodrun":
        return ranges
    fallback = ("--max-restarts", str(fallback_restarts)) if fallback_restarts else ()
    spares = ("--spares", "1", *(("--cold-spares",) if mode == "cold-spare" else ())
              ) if mode in ("spare", "cold-spare") else ()
    return (*ranges, *fallback, *spares)


def _command(mode: str, cluster: sim.SimCluster, work: Path, opts: argparse.Namespace) -> str:
    script = work / "train.py"
    script.write_text(CAMPAIGN_SCRIPT)
    args = [str(opts.epochs), str(opts.steps_per_epoch), str(opts.pause), str(opts.commit)]
    path = _prepare(cluster, work)
    extra = launcher_options(mode, tuple(opts.cooldown), opts.fallback_restarts)
    # recovery._argv's modes; memory, the spares and clean launch as memory does
    launcher = mode if mode in ("horovodrun", "elastic", "restart") else "memory"
    argv = _argv(launcher, cluster, work, script, args, opts.gloo_timeout_seconds,
                 hosts=4 if "spare" in mode else 3, extra=extra, restarts=opts.incidents + 2)
    env = f"PATH={shlex.quote(path)} " if mode == "horovodrun" else ""
    return f"cd {shlex.quote(str(work))} && {env}" + shlex.join(argv)


def run_mode(mode: str, cluster: sim.SimCluster, work: Path, opts: argparse.Namespace,
             interval: float) -> tuple[figures.Summary, list[Step]]:
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
        # a fault every interval until the job ends (or --incidents are in, or training has
        # stopped for --deadline: hung); the fault-free run waits for its end
        for turn in itertools.count():
            if mode == "clean" or (opts.incidents and turn >= opts.incidents):
                break
            while time.monotonic() < start + turn * interval and proc.poll() is None:
                time.sleep(0.05)
            if proc.poll() is not None or _stalled(lines, opts.deadline):
                break
            kind, found = next(kinds), injector.victim(turn)
            if found is None:
                print(f"  {mode}: no rank to hit at fault {turn + 1}", flush=True)
                continue
            faults.append(figures.Fault(time.time(), kind, found[0]))
            injector.inject(kind, *found)
            print(f"  {mode}: fault {turn + 1}: {kind} on {found[0]}", flush=True)
        while proc.poll() is None and not _stalled(lines, opts.deadline):
            time.sleep(0.5)
        exit_code = proc.poll()  # None: no batch for --deadline seconds, a hang
    finally:
        injector.undo()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    ended = time.time()
    (work / "output.log").write_text("".join(lines))
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in lines if "RESULT " in line]
    steps = parse_steps(lines)
    return figures.summarise(
        mode, steps, faults, launched=launched, ended=ended,
        accuracy=float(results[-1]["accuracy"]) if results else None, exit_code=exit_code,
        interval=None if mode == "clean" else interval), steps


def plot(summaries: list[figures.Summary], path: Path) -> Path:
    from ringtrain.bench.figures import dress, pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in summaries:
        points = [(n, i.ttta_s) for n, i in enumerate(s.incidents, 1) if i.ttta_s is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=f"{s.mode}, every "
                    f"{s.interval:g} s (ETTR "
                    f"{'-' if s.ettr is None else format(s.ettr, '.2f')})")
    ax.set_xlabel("incident")
    ax.set_ylabel("time to training again (s)")
    ax.set_yscale("log")
    ax.set_title("fault campaign: " + ", ".join(KINDS) + " in turn")
    dress(ax)
    return save_figure(plt, fig, path)


def reload(paths: list[Path]) -> list[figures.Summary]:
    """The summaries again from kept campaign.json files (``--out``), as run_mode made them."""
    out = []
    for path in paths:
        try:
            records = json.loads(path.read_text())
            for r in records:
                steps = [Step(*line) for line in r["step_lines"]]
                faults = [figures.Fault(i["at"], i["kind"], i["host"]) for i in r["incidents"]]
                out.append(figures.summarise(
                    r["mode"], steps, faults, launched=r["launched"],
                    ended=r["launched"] + r["wall_s"], accuracy=r["accuracy"],
                    exit_code=r["exit_code"], interval=r["interval"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            sys.exit(f"{path}: not a campaign.json of this version ({err}); keep one with "
                     "--out")
    return out


def parse_intervals(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, comma-separated: 60,30") from None
    if not values or min(values) < 5:
        raise argparse.ArgumentTypeError(f"{text!r}: each interval at least 5 s")
    return values


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {', '.join(unknown) or 'no mode'} is not a mode; pick from "
            f"{','.join(MODES)}")
    return modes


def runs(modes: list[str], intervals: tuple[float, ...]) -> list[tuple[str, float]]:
    """The runs in order: the fault-free one first (once, whatever the rates, on the slowest
    rate's schedule without its faults), then every faulted mode at each rate, the slowest
    first. PURE."""
    faulted = [m for m in modes if m != "clean"]
    return ([("clean", max(intervals))] if "clean" in modes else []) + [
        (m, i) for i in sorted(set(intervals), reverse=True) for m in faulted]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ringtrain.bench.launcher.campaign", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", type=parse_modes, default="restart,memory,spare,horovodrun,clean",
                   help=f"the ways back to run, comma-separated, from {','.join(MODES)} "
                   "(default: %(default)s)")
    p.add_argument("--incidents", type=int, default=0,
                   help="faults per run at most; 0: one every interval until the job ends")
    p.add_argument("--intervals", "--interval", type=parse_intervals, default=(60.0, 30.0),
                   help="seconds between faults, one run per mode and rate: 60,30")
    p.add_argument("--warmup", type=float, default=20.0, help="seconds before the first fault")
    p.add_argument("--epochs", type=int, default=40,
                   help="the task's epochs: the job's length (30: about 7 minutes fault-free "
                   "on 2 cores)")
    p.add_argument("--steps-per-epoch", type=int, default=100, help="steps in an epoch")
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds each step sleeps besides its compute (a step's floor)")
    p.add_argument("--commit", type=int, default=10,
                   help="steps between the elastic modes' memory commits")
    p.add_argument("--link-down", type=float, default=20.0,
                   help="seconds a link fault keeps the host's link down")
    p.add_argument("--stall", type=float, default=4.0,
                   help="seconds a stall fault keeps the rank stopped (SIGSTOP)")
    p.add_argument("--gloo-timeout-seconds", type=int, default=0,
                   help="every mode's Gloo timeout, the anchor's too; 0: none given, each "
                   "launcher's default (Horovod's 30 s), as a user meets it")
    p.add_argument("--cooldown", type=int, nargs=2, default=(10, 40), metavar=("MIN", "MAX"),
                   help="--blacklist-cooldown-range for every elastic mode and the anchor")
    p.add_argument("--fallback-restarts", type=int, default=0,
                   help="ringtrain's elastic modes: --max-restarts N, a restart from the last "
                   "checkpoint when the elastic job itself fails")
    p.add_argument("--deadline", type=float, default=300.0,
                   help="seconds without a batch before a job counts as hung (the faults "
                   "stop, the job is ended)")
    p.add_argument("--out", type=Path, default=None,
                   help="a directory to keep campaign.json and campaign.png in")
    p.add_argument("--figures", type=Path, nargs="+", default=None, metavar="JSON",
                   help="no run: the tables again from kept campaign.json files (every step "
                   "line is in them), the fault-free run of any of them the reference")
    opts = p.parse_args(argv)
    if opts.figures:
        print("\n".join(figures.report(reload(opts.figures))))
        return 0
    summaries, records = [], []
    with tempfile.TemporaryDirectory(prefix="rt-campaign-") as tmp:
        cluster = sim.up(sim.SimConfig(name="cbench", hosts=4, state_dir=Path(tmp) / "sim"))
        try:
            for mode, interval in runs(opts.modes, opts.intervals):
                work = Path(tmp) / (mode if mode == "clean" else f"{mode}-{interval:g}")
                summary, steps = run_mode(mode, cluster, work, opts, interval)
                summaries.append(summary)
                records.append({**figures.as_json(summary),
                                "step_lines": [[s.at, s.step, s.size] for s in steps]})
                clean = next((s.accuracy for s in summaries if s.interval is None), None)
                print(figures.HEADER + "\n" + figures.row(summary, clean), flush=True)
        finally:
            sim.down(cluster.config, purge=True)
    print("\n".join(figures.report(summaries)))
    count = f"{opts.incidents} faults per run" if opts.incidents else "a fault every interval"
    gloo = (f"Gloo timeout {opts.gloo_timeout_seconds} s" if opts.gloo_timeout_seconds
            else "the launchers' default Gloo timeout")
    print(f"\n{count} ({', '.join(KINDS)} in turn; link down "
          f"{opts.link_down:g} s, stall {opts.stall:g} s); 3 ranks train the digits CNN, "
          f"{opts.epochs} x {opts.steps_per_epoch} batches of 32 with a {opts.pause:g} s pause, "
          f"commits every {opts.commit} batches, {gloo}, "
          f"cooldown {opts.cooldown[0]}-{opts.cooldown[1]} s. TTTA: median seconds from a fault "
          "to the first batch after its first disruption; lost: median seconds lost per fault, "
          "from the fault to training again at the rate before it, less the batches it "
          "trained for the first time meanwhile. faults s, "
          "start/end, other: the wall time lost to the faults (each moment once), to start-up "
          "and the end, and to neither (steady batches' spread); together wall x (1 - ETTR). "
          "vs clean: accuracy minus the fault-free run's, in points.")
    if opts.out is not None:
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "campaign.json").write_text(json.dumps(records, indent=1))
        print(f"wrote {plot(summaries, opts.out / 'campaign.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
