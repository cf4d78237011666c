"""Run a LaunchPlan: the only module that starts job processes.

The launcher (mpirun or horovodrun) runs in a new session, so the job is its own process group:
the terminal's Ctrl-C reaches ringtrain only, and ringtrain stops the job by group (SIGTERM,
then SIGKILL after a grace period). Output is read line by line; Open MPI's ``--tag-output``
prefix (``[1,3]<stdout>:``) and Gloo's (``[3]<stdout>:``) name the rank, so each line is
appended to ``runs/<id>/attempt-N/rank.<N>.log`` (through the open run directory, never a
link), time-stamped, and handed to the caller with its rank.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

from ringtrain.errors import LaunchError
from ringtrain.launch.job import driverssh
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.plan.launchers import DISCOVERY, ELASTIC_HOSTS, SHIM_DIR, discovery_script
from ringtrain.launch.plan.make import LaunchPlan
from ringtrain.launch.record.result import Failure, FailureKind, JobResult, JobState, RankFailure
from ringtrain.rank.events import ERROR_MARK

log = logging.getLogger(__name__)

_SRUN_RE = re.compile(r"^\s*(?P<rank>\d+): (?P<text>.*)$")
_TAG_RE = re.compile(r"^\[(?:\d+,)?(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>:(?P<text>.*)$")
_MPI_FAIL_RE = re.compile(r"Process name:\s*\[\[\d+,\d+\],(?P<rank>\d+)\]")
_MPI_EXIT_RE = re.compile(r"Exit code:\s*(?P<code>\d+)")
_ABORT_RE = re.compile(r"MPI_ABORT was invoked on rank (?P<rank>\d+)")
_SIGNAL_RE = re.compile(
    r"rank (?P<rank>\d+) with PID \d+ on node (?P<host>\S+) exited on signal (?P<signum>\d+)"
)
# Open MPI 4: "Remote daemon: [[21823,0],2] on node gpu03" (lost communication), or "An ORTE
# daemon has unexpectedly failed ... on node gpu03"
_DAEMON_LOST_RE = re.compile(
    r"(?:Remote daemon:\s*\[\[\d+,\d+\],\d+\] on node|daemon has unexpectedly failed"
    r"[\s\S]{0,400}?(?:on node|Remote host:))\s*(?P<node>[\w.-]+)"
)
TAIL_LINES = 20

LineSink = Callable[["OutputLine"], None]


@dataclass(frozen=True, slots=True)
class OutputLine:
    rank: int | None
    stream: str
    text: str


@dataclass
class _Logs:
    run_dir: RunDir
    folder: str  # the attempt's, inside run_dir
    files: dict[int | None, IO[str]] = field(default_factory=dict)
    tails: dict[int | None, list[str]] = field(default_factory=dict)
    launcher_lines: list[str] = field(default_factory=list)
    closed: bool = False
    failed: bool = False

    def write(self, line: OutputLine) -> None:
        if self.closed:
            return
        try:
            self._file(line.rank).write(f"{_stamp()} {line.text}\n")
        except OSError as err:  # the run dir vanished or the disk is full: keep streaming
            if not self.failed:
                log.warning("cannot write rank logs in %s: %s",
                            self.run_dir.path / self.folder, err)
            self.failed = True
        tail = self.tails.setdefault(line.rank, [])
        tail.append(line.text)
        del tail[:-TAIL_LINES]
        if line.rank is None:
            self.launcher_lines.append(line.text)

    def _file(self, rank: int | None) -> IO[str]:
        fh = self.files.get(rank)
        if fh is None:
            name = "launcher.log" if rank is None else f"rank.{rank}.log"
            fh = self.files[rank] = self.run_dir.open_append(f"{self.folder}/{name}")
        return fh

    def close(self) -> None:
        self.closed = True
        for fh in self.files.values():
            fh.close()


def _stamp(now: float | None = None) -> str:
    """When the launcher read the line, to the millisecond (local time, like Open MPI's
    own --timestamp-output): every line of a rank's log starts with it."""
    now = time.time() if now is None else now
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def parse_line(raw: str, *, srun: bool = False) -> OutputLine:
    """Split a launcher output line into rank, stream and text. Open MPI ``--tag-output`` and
    horovodrun's Gloo prefix carry the stream; srun ``--label`` gives ``N: text`` (stdout and
    stderr merged, as srun writes them)."""
    if srun:
        s = _SRUN_RE.match(raw)
        if s is not None:
            return OutputLine(rank=int(s.group("rank")), stream="stdout", text=s.group("text"))
    m = _TAG_RE.match(raw)
    if m is None:
        return OutputLine(rank=None, stream="launcher", text=raw)
    # Open MPI tags each chunk it reads from a rank's pipe: a line that crossed a read boundary
    # arrives as "[1,0]<stdout>:first half[1,0]<stdout>:second half"; the rank wrote one line
    tag = raw[: m.start("text")]
    return OutputLine(rank=int(m.group("rank")), stream=m.group("stream"),
                      text=m.group("text").replace(tag, ""))


class Job:
    """A started plan. ``wait()`` returns the JobResult; ``stop()`` ends the whole group."""

    def __init__(self, plan: LaunchPlan, proc: subprocess.Popen[str], sink: LineSink,
                 run_dir: RunDir) -> None:
        self.plan = plan
        self.proc = proc
        self.started = time.monotonic()
        self.interrupted = False
        self.stopping = False
        self._sink_failed = False
        self.stop_signal: int = signal.SIGTERM
        self._logs = _Logs(run_dir, plan.attempt_name)
        self._sink = sink
        self._reader = threading.Thread(target=self._pump, name="job-output", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        srun = self.plan.command.argv[0] == "srun"
        for raw in self.proc.stdout:
            line = parse_line(raw.rstrip("\n"), srun=srun)
            self._logs.write(line)
            try:
                self._sink(line)
            except Exception:
                if not self._sink_failed:  # (mpirun would block on a full pipe)
                    log.warning("cannot show job output any more; it still goes to the logs")
                self._sink_failed = True

    def ended(self, timeout_s: float) -> bool:
        """Whether the launcher process has exited, waiting up to ``timeout_s`` for it."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def request_stop(
        self, grace_s: float = 5.0, signum: int = signal.SIGTERM, *, by_user: bool = True
    ) -> None:
        """SIGTERM the job's process group now, SIGKILL it ``grace_s`` later if still there.

        Safe to call from a signal handler: it only sends signals and starts a timer thread.
        A second call escalates to SIGKILL at once.
        """
        if self.stopping:
            _signal_group(self.proc.pid, signal.SIGKILL)
            return
        self.stopping = True
        self.interrupted = by_user
        self.stop_signal = signum
        _signal_group(self.proc.pid, signal.SIGTERM)
        timer = threading.Timer(grace_s, self._kill_if_running)
        timer.daemon = True
        timer.start()

    def _kill_if_running(self) -> None:
        if self.proc.poll() is None:
            log.warning("job still running after SIGTERM; sending SIGKILL")
            _signal_group(self.proc.pid, signal.SIGKILL)

    def cut_host(self, host: str) -> int:
        """--elastic: end horovodrun's ssh to ``host`` (lost), so its driver hears now."""
        return driverssh.cut(self.proc.pid, host)

    def tails(self) -> dict[int | None, list[str]]:
        """The last lines of every rank's output so far (None: mpirun's own lines)."""
        snapshot = dict(self._logs.tails)  # one C-level copy: the reader thread may add ranks
        return {rank: list(lines) for rank, lines in snapshot.items()}

    def wait(self) -> JobResult:
        rc = self.proc.wait()
        _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers that left the launcher behind
        # Output may stay open in processes outside the group (mpirun's ssh clients to a lost
        # host); the reaper ends those, then finish() collects the rest.
        self._reader.join(timeout=1)
        return self._result(rc, time.monotonic() - self.started)

    def finish(self, timeout_s: float = 5.0) -> None:
        """After teardown: read what output is left and close the logs."""
        self._reader.join(timeout=timeout_s)
        self._logs.close()

    def _result(self, rc: int, duration: float) -> JobResult:
        if self.interrupted:
            # The conventional status of a program stopped by a signal: 130 for Ctrl-C.
            return JobResult(
                JobState.INTERRUPTED,
                128 + self.stop_signal,
                self.plan.run_dir,
                duration,
                signal_name=_signal_name(self.stop_signal),
            )
        if rc == 0:
            return JobResult(JobState.SUCCEEDED, 0, self.plan.run_dir, duration)
        exit_code = 128 - rc if rc < 0 else rc
        failure = failure_from_output(
            self._logs.launcher_lines,
            self._logs.tails,
            {r.rank: r.host for r in self.plan.allocation.ranks},
            exit_code,
        )
        return JobResult(JobState.FAILED, exit_code, self.plan.run_dir, duration, failure)


def failure_from_output(
    launcher_lines: list[str],
    tails: Mapping[int | None, list[str]],
    hosts: Mapping[int, str],
    exit_code: int,
) -> Failure:
    """The job's own failure, read from what the launcher and the ranks printed. Pure.

    Open MPI names the first failing rank (its exit code or signal); every other rank that
    printed a traceback failed too. ``hosts``: rank -> inventory host name (the user's name,
    not the one Open MPI prints)."""
    daemon = _DAEMON_LOST_RE.search("\n".join(launcher_lines))
    if daemon is not None:
        node = daemon.group("node")
        host = next((h for h in hosts.values() if h == node), node)
        lost = tuple(RankFailure(r, h, log_tail=tuple(tails.get(r, ())))
                     for r, h in sorted(hosts.items()) if h == host)
        return Failure(
            FailureKind.DAEMON_LOST,
            f"mpirun lost its daemon (orted) on {host}: the daemon was killed, or the link to "
            f"{host} broke (ranks {', '.join(str(r.rank) for r in lost) or '-'})",
            (host,), lost, _launcher_tail(launcher_lines),
        )
    ranks: list[RankFailure] = []
    for rank, code in find_failed_ranks(launcher_lines, tails):
        signame = _signal_name(code - 128) if code is not None and code > 128 else None
        ranks.append(RankFailure(rank, hosts.get(rank), code, signame, tuple(tails.get(rank, ()))))
    if not ranks:
        how = f"exit code {exit_code}"
        return Failure(FailureKind.LAUNCHER, f"the job failed ({how}); no rank was named",
                       launcher_tail=_launcher_tail(launcher_lines))
    root = ranks[0]
    kind = FailureKind.RANK_SIGNAL if root.signal_name else FailureKind.RANK_EXIT
    code = root.exit_code or exit_code
    how = f"signal {root.signal_name}" if root.signal_name else f"exit code {code}"
    where = f" on {root.host}" if root.host else ""
    return Failure(
        kind, f"rank {root.rank}{where} failed ({how})", (root.host,) if root.host else (),
        tuple(ranks),
    )


# ssh's and the resolver's own words: the root cause, even when ORTE prints a page after them.
_SSH_CAUSE_RE = re.compile(
    r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|Permission denied"
    r"|Could not resolve hostname|Connection refused|No route to host|Connection timed out"
    r"|Name or service not known|command not found|No such file or directory"
)


def _launcher_tail(lines: list[str], n: int = 10) -> tuple[str, ...]:
    """mpirun's last words, without its banner rules (a host key refused, a name that does
    not resolve, a daemon that could not start: ssh and ORTE say why there). A line from ssh
    naming the cause is always kept, first, however much ORTE printed after it."""
    useful = [ln for ln in lines if ln.strip() and not set(ln.strip()) <= {"-"}]
    causes: list[str] = []
    for ln in useful:
        if _SSH_CAUSE_RE.search(ln) and ln not in causes:
            causes.append(ln)
    causes = causes[:3]
    rest = [ln for ln in useful if ln not in causes][-(n - len(causes)):]
    return tuple(causes + rest)


def find_failed_ranks(
    launcher_lines: list[str], tails: Mapping[int | None, list[str]]
) -> list[tuple[int, int | None]]:
    """(rank, exit code or 128+signal when known): the rank Open MPI names first, then every
    other rank whose output holds a traceback, in rank order."""
    text = "\n".join(launcher_lines)
    found: list[tuple[int, int | None]] = []
    for regex in (_SIGNAL_RE, _ABORT_RE, _MPI_FAIL_RE):
        m = regex.search(text)
        if m is not None:
            if m.groupdict().get("signum"):
                found.append((int(m.group("rank")), 128 + int(m.group("signum"))))
            else:
                code_m = _MPI_EXIT_RE.search(text, m.end())
                found.append((int(m.group("rank")), int(code_m.group("code")) if code_m else None))
            break
    named = {r for r, _ in found}
    for rank in sorted(r for r in tails if r is not None):
        # a Python traceback, or a ringtrain error the rank's entry printed instead of one
        if rank not in named and any(line.startswith(("Traceback", ERROR_MARK))
                                     for line in tails[rank]):
            found.append((rank, None))
    return found


def prepare(plan: LaunchPlan, run_dir: RunDir) -> None:
    """Write the attempt's files through the open run directory, none through a link: the
    hostfile the argv names, ssh_config, the discovery script and ssh shim (named as the
    launcher's children reach them: plan.reach), and plan.json. Starts nothing."""
    folder = plan.attempt_name
    run_dir.mkdir(folder)
    run_dir.write(f"{folder}/hostfile", plan.hostfile_text)
    if plan.ssh_config_text:
        run_dir.write(f"{folder}/ssh_config", plan.ssh_config_text)
    if plan.elastic_hosts_text:  # --elastic: the discovery script and what it prints
        run_dir.write(f"{folder}/{ELASTIC_HOSTS}", plan.elastic_hosts_text)
        hosts = plan.reached_attempt_dir / ELASTIC_HOSTS
        run_dir.write(f"{folder}/{DISCOVERY}", discovery_script(hosts), mode=0o700)
    if plan.ssh_shim_text:  # horovodrun's ssh (launchers.ssh_shim)
        run_dir.mkdir(f"{folder}/{SHIM_DIR}")
        run_dir.write(f"{folder}/{SHIM_DIR}/ssh", plan.ssh_shim_text, mode=0o700)
    run_dir.write(f"{folder}/plan.json", plan.to_json_text())


def start(plan: LaunchPlan, sink: LineSink, run_dir: RunDir,
          environ: Mapping[str, str] | None = None) -> Job:
    """Write the attempt's files (see prepare) and start the plan's command (``started``: its
    paths through the run directory's descriptor): ``environ`` (this process's by default)
    plus the plan's delta, less the names it unsets (Gloo's secrets)."""
    prepare(plan, run_dir)
    command = plan.started
    env = command.environment(os.environ if environ is None else environ)
    try:
        proc = subprocess.Popen(
            command.argv,
            cwd=plan.working_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except FileNotFoundError as err:
        raise LaunchError(
            f"cannot start {plan.command.argv[0]!r}: not found",
            "install Open MPI (apt-get install openmpi-bin) and the train extra "
            "(pip install 'ringtrain[train]'), or run `make demo`, which sets both up",
        ) from err
    return Job(plan, proc, sink, run_dir)


def count_local_gpus(timeout_s: float = 10.0) -> int:
    """GPUs ``nvidia-smi -L`` lists on this machine; 0 when there is no working nvidia-smi."""
    try:
        out = subprocess.run(
            ("nvidia-smi", "-L"), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return gpus_listed(out.stdout)


_GPU_LISTED_RE = re.compile(r"^GPU \d+: .+\(UUID: (GPU|MIG)-")


def gpus_listed(text: str) -> int:
    """Working GPUs in ``nvidia-smi -L`` output: ``GPU 0: <model> (UUID: GPU-...)`` lines only,
    not a lost GPU's error line (``... GPU 0000:07:00.0: GPU is lost ...``)."""
    return sum(1 for line in text.splitlines() if _GPU_LISTED_RE.match(line))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
