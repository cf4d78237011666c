"""Run the ring check on a set of hosts: one rank per host, through the ordinary launch Session
(same SSH settings, supervision, teardown, run directory and logs as any job), then read rank
0's ``RINGCHECK`` line and analyse it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ringtrain.errors import LaunchError
from ringtrain.hostfile import Inventory
from ringtrain.launch.job.rundir import RunDir
from ringtrain.launch.record.result import JobState
from ringtrain.launch.reporter import Reporter
from ringtrain.launch.session import Session
from ringtrain.rank import isolated
from ringtrain.remote import Remote
from ringtrain.ringcheck.intra import measure_intra
from ringtrain.ringcheck.outliers import Pair, RingVerdict, analyse
from ringtrain.spec import (
    Backend,
    Entry,
    GpuRule,
    LaunchSpec,
    PreflightSpec,
    SshSpec,
    SupervisionPolicy,
)

MARK = "RINGCHECK "
PAIR_MARK = "RINGCHECK-PAIR "


@dataclass(frozen=True, slots=True)
class RingCheckOptions:
    runs_dir: Path = Path("runs")
    trust_groups: tuple[str, ...] = ()  # groups trusted to write runs_dir (launch/job/rundir.py)
    ssh: SshSpec = field(default_factory=SshSpec)
    python: str | None = None
    network_interface: str | None = None
    expect_Bps: float | None = None
    slow_ratio: float = 0.5
    pair_bytes: int = 4 << 20
    ring_bytes: int = 8 << 20
    timeout_s: float = 300.0


@dataclass(frozen=True, slots=True)
class RingCheck:
    verdict: RingVerdict
    pairs: list[Pair]
    raw: dict[str, Any]
    run_dir: Path
    intra: dict[str, dict[str, Any]] = field(default_factory=dict)  # GPU-to-GPU per host
    files: RunDir | None = field(default=None, repr=False, compare=False)  # run_dir, open


def run_ring_check(
    inventory: Inventory, remote: Remote, opts: RingCheckOptions, reporter: Reporter
) -> RingCheck:
    """Measure every host pair and the ring over ``inventory`` (one rank per host)."""
    one_each = replace(inventory, hosts=tuple(replace(h, slots=1, max_slots=None)
                                              for h in inventory.hosts))
    spec = LaunchSpec(
        script="ringtrain.ringcheck.rankprog",
        script_args=("--size", str(opts.pair_bytes), "--ring-size", str(opts.ring_bytes)),
        entry=Entry.MODULE,
        # waiting ranks yield the CPU instead of spinning: where hosts share cores (a
        # simulated cluster, an oversubscribed node) spinning peers distort the timings
        mpi_args=("-mca", "mpi_yield_when_idle", "1"),
        np=len(one_each.hosts),
        backend=Backend.MPIRUN,
        runs_dir=opts.runs_dir,
        trust_groups=opts.trust_groups,
        # ringtrain's own program needs nothing from the caller's directory, and the rank
        # entry puts its working directory first on sys.path: run it from / (issue 40)
        working_dir=Path(isolated.NEUTRAL_DIR),
        python=opts.python,
        network_interface=opts.network_interface,
        ssh=opts.ssh,
        preflight=PreflightSpec(enabled=False, gpus=GpuRule.IGNORED),
        supervision=SupervisionPolicy(start_timeout=min(120.0, opts.timeout_s),
                                      expect_hvd_init=False),  # an mpi4py program
    )
    session = Session(spec, one_each, remote, reporter)
    result = session.run()
    if result.state is not JobState.SUCCEEDED:
        why = result.failure.message if result.failure else result.state.value
        raise LaunchError(f"the ring check failed: {why}",
                          f"see the logs in {result.attempt_dir}")
    files = session.open_run_dir()
    folder = result.attempt_dir.name
    raw = _read(files, f"{folder}/rank.0.log", result.attempt_dir)
    plan = json.loads(files.read_text(f"{folder}/plan.json"))
    hosts = tuple(h["name"] for h in plan["hosts"] for _ in range(h["slots"]))
    pairs = [Pair(p["a"], p["b"], p["bandwidth_Bps"], p["latency_s"]) for p in raw["pairs"]]
    ring = raw.get("ring") or {}
    verdict = analyse(hosts, pairs, expect_Bps=opts.expect_Bps, slow_ratio=opts.slow_ratio,
                      ring_busbw_Bps=ring.get("busbw_Bps"))
    intra = measure_intra(remote, one_each, opts.python or sys.executable)
    out = {"verdict": verdict.to_json(), "measured": raw, "gpu_to_gpu": intra}
    files.write("ringcheck.json", json.dumps(out, indent=2), mode=0o644)
    return RingCheck(verdict, pairs, raw, session.run_dir, intra, files)


def _read(files: RunDir, log: str, folder: Path) -> dict[str, Any]:
    """Rank 0's summary line with its pair lines gathered under ``pairs``."""
    try:
        text = files.read_text(log, errors="replace")
    except OSError as err:
        raise LaunchError(f"the ring check left no result: {err}", f"see {folder}") from err
    pairs: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    try:
        for line in text.splitlines():
            _, mark, body = line.partition(PAIR_MARK)
            if mark:
                pairs.append(json.loads(body))
                continue
            _, mark, body = line.partition(MARK)
            if mark:
                summary = json.loads(body)
    except ValueError as err:
        raise LaunchError(f"the ring check's rank 0 printed a damaged result line ({err})",
                          f"see {folder.parent / log}") from err
    if summary is None or len(pairs) != summary.get("pair_count"):
        raise LaunchError("the ring check's rank 0 printed no complete result in "
                          f"{folder.parent / log}", f"see the logs in {folder}")
    return {**summary, "pairs": pairs}
