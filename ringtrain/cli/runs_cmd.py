"""``ringtrain runs``: past runs from ``runs/*/result.json``; ``ringtrain runs show ID``."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ringtrain.checkpoint.location import Location
from ringtrain.cli.plain import cell, echo
from ringtrain.errors import UsageError
from ringtrain.launch.record.result import JobResult, JobState, ResumePoint, incidents
from ringtrain.rank import procfs

_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow", "no result": "cyan",
          "running": "cyan", "launcher killed": "red"}


def load_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run directory with its result (or 'running' when it has none yet), newest first."""
    runs: list[dict[str, Any]] = []
    if not runs_dir.is_dir():
        return runs
    for run_dir in runs_dir.iterdir():
        if not run_dir.is_dir() or not (run_dir / "attempt-1").is_dir():
            continue
        runs.append(_load(run_dir))
    return sorted(runs, key=lambda r: r["run_id"], reverse=True)


def _load(run_dir: Path) -> dict[str, Any]:
    # No result.json: still running, or the launcher itself was killed before writing one.
    data: dict[str, Any] = {"run_id": run_dir.name, "run_dir": str(run_dir),
                            "state": _without_result(run_dir)}
    with contextlib.suppress(OSError, ValueError):
        data.update(json.loads((run_dir / "result.json").read_text()))
    plan = _plan(run_dir, len(data.get("attempts", [])) or 1)
    data["hosts"] = [h["name"] for h in plan.get("hosts", [])]
    data["np"] = plan.get("np", data.get("np"))
    spec = plan.get("spec") or {}
    data["strategy"] = spec.get("strategy", "horovod")
    if spec.get("ps"):
        data["ps"] = spec["ps"]
    data["started"] = _started(run_dir)
    data["last_checkpoint"] = _describe(data.get("last_checkpoint")) or _last_checkpoint(run_dir)
    return data


def _without_result(run_dir: Path) -> str:
    """'running' while the launcher that wrote launcher.json lives (same PID and start time,
    on this host), 'launcher killed' when it is gone; 'no result' when nothing says."""
    try:
        record = json.loads((run_dir / "launcher.json").read_text())
    except (OSError, ValueError):
        return "no result"
    if record.get("host") != socket.gethostname():
        return "no result"  # launched elsewhere: this host cannot tell
    pid = record.get("pid")
    alive = isinstance(pid, int) and procfs.start_time(pid) == record.get("start")
    return "running" if alive else "launcher killed"


def _last_event(run_dir: Path) -> str | None:
    with contextlib.suppress(OSError):
        lines = (run_dir / "events.log").read_text().splitlines()
        return lines[-1] if lines else None
    return None


def _describe(ckpt: Any) -> str | None:
    """result.json's record of the newest committed checkpoint (any storage: s3://, hdfs://)."""
    point = ResumePoint.from_json(ckpt)
    return point.describe() if point is not None else None


def _plan(run_dir: Path, attempt: int) -> dict[str, Any]:
    try:
        plan: dict[str, Any] = json.loads(
            (run_dir / f"attempt-{attempt}" / "plan.json").read_text()
        )
    except (OSError, ValueError):
        return {}
    return plan


def _started(run_dir: Path) -> str:
    try:
        stamp = (run_dir / "attempt-1" / "plan.json").stat().st_mtime
    except OSError:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _last_checkpoint(run_dir: Path) -> str | None:
    """The newest local checkpoint manifest in the run dir (a run that wrote no result.json)."""
    manifests = sorted(Path(Location.default(run_dir).manifests).glob("*.json"))
    return manifests[-1].stem if manifests else None


@click.group("runs", invoke_without_command=True)
@click.option(
    "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("-n", "--last", type=click.IntRange(min=1), default=20, show_default=True)
@click.pass_context
def command(ctx: click.Context, runs_dir: Path, as_json: bool, last: int) -> None:
    """List past runs: id, start, hosts, ranks, attempts, outcome, duration, last checkpoint."""
    ctx.obj = runs_dir
    if ctx.invoked_subcommand is not None:
        return
    runs = load_runs(runs_dir)[:last]
    if as_json:
        click.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        click.echo(f"no runs in {runs_dir}/ (ringtrain launch writes them there)")
        return
    table = Table(title=cell(f"runs in {runs_dir}/"), header_style="bold")
    for col in ("RUN", "STARTED", "HOSTS", "NP", "ATTEMPTS", "OUTCOME", "DURATION", "CHECKPOINT"):
        table.add_column(col)
    for r in runs:
        hosts = ",".join(r["hosts"][:3]) + (
            f" +{len(r['hosts']) - 3}" if len(r["hosts"]) > 3 else ""
        )
        state = r["state"]
        outcome = str(state)
        if state not in ("succeeded", "no result", "running", "launcher killed"):
            outcome += f" ({r.get('exit_code')})"
        duration = f"{r['duration_s']:.1f} s" if "duration_s" in r else "-"
        # every cell from the run's files: text, never markup (plain.py)
        table.add_row(
            cell(r["run_id"]),
            cell(r["started"]),
            cell(hosts or "-"),
            cell(r.get("np") or "-"),
            str(len(r.get("attempts", [])) or "-"),
            cell(outcome, _STYLE.get(state, "white")),
            duration,
            cell(r["last_checkpoint"] or "-"),
        )
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 150)
    console.print(table)


@command.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run as JSON (result.json with the run's id, start and hosts).")
@click.pass_obj
def show(runs_dir: Path, run_id: str, as_json: bool) -> None:
    """Show one run: attempts, faults, failing rank and log tail, teardown per host."""
    run_dir = runs_dir / run_id
    if not (run_dir / "attempt-1").is_dir():
        known = ", ".join(r["run_id"] for r in load_runs(runs_dir)[:5]) or "none"
        raise UsageError(f"no run {run_id!r} in {runs_dir}/", f"pick one of: {known}")
    r = _load(run_dir)
    if as_json:
        click.echo(json.dumps(r, indent=2, default=str))  # JSON: escaped
        return
    echo(f"run {r['run_id']}  started {r['started']}  state {r['state']}")
    strategy = r.get("strategy", "horovod")
    echo(f"dir {run_dir}  hosts {','.join(r['hosts'])}  ranks {r.get('np')}"
               + ("" if strategy == "horovod" else f"  strategy {strategy}")
               + (f" (ps {r['ps']})" if r.get("ps") else ""))
    if r["state"] == "launcher killed":
        echo(
            f"the launcher was killed before it wrote result.json; last event: "
            f"{_last_event(run_dir) or '-'}; its ranks ended themselves once they stopped "
            "hearing from it (heartbeat timeout + 2 s)"
        )
    result = _result(run_dir)
    if result is None:
        return
    for a in result.attempts:
        _show_attempt(a)
    ledger = incidents(result.attempts)
    if ledger:
        echo("\nrecovery ledger (seconds after the fault was detected):")
        for incident in ledger:
            echo(f"  {incident.describe()}")
    if result.state is not JobState.SUCCEEDED:
        echo(f"\n{result.what_ringtrain_did()}")
    elif r["last_checkpoint"]:
        echo(f"\nlast checkpoint: {r['last_checkpoint']}")


def _result(run_dir: Path) -> JobResult | None:
    """The run's result.json read back as the value the launch printed."""
    try:
        return JobResult.from_json(json.loads((run_dir / "result.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _show_attempt(a: JobResult) -> None:
    echo(f"\nattempt {a.attempt}: {a.state.value} (exit {a.exit_code}) "
               f"in {a.duration_s:.1f} s")
    f = a.failure
    if f is not None and f.kind.detected:
        echo(f"  fault: {f.message}")
    root = f.root if f is not None else None
    if root is not None:
        how = root.signal_name or a.signal_name or f"exit code {a.exit_code}"
        task = f", TensorFlow task {a.failed_task}" if a.failed_task else ""
        echo(f"  first failing rank: {root.rank}{task} on {root.host} ({how})")
        for line in root.log_tail[-10:]:
            echo(f"    | {line}")
    for s in a.stragglers:
        echo(f"  straggler: {s.host} rank {s.rank}: {s.vs_median:.1f}x the median "
                   f"(peak {s.peak:.1f}x)" + (", caught up" if s.cleared else ""))
    for t in a.teardown:
        status = "clean" if t.clean else (t.error or "LEFT: " + "; ".join(t.left))
        echo(f"  teardown {t.host}: ended {t.killed} process(es); {status}")
    if a.decision and a.state is not JobState.SUCCEEDED:
        echo(f"  then: {a.decision}")
