"""Tear a job down on every host and confirm nothing of it is left (sequenced by
``Session._tear_down``).

``reap_hosts()`` runs the reaper on every host through the Remote seam, each host with its own
PID list (``run_each``), and ``local_teardown()`` on this machine; each kills by PID and start
time whatever of this job is left and confirms nothing is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ringtrain.hostfile import Allocation
from ringtrain.launch.record.result import HostTeardown
from ringtrain.launch.record.snapshot import Snapshot
from ringtrain.launch.supervise.detect import rank_hosts
from ringtrain.rank import isolated, procfs, reaper
from ringtrain.remote import CmdResult, Remote


def reaper_argv(python: str, run_id: str, pids: Mapping[int, int]) -> tuple[str, ...]:
    specs = [f"--pid={pid}:{start}" for pid, start in sorted(pids.items())]
    return isolated.module_argv(python, "ringtrain.rank.reaper", run_id, "--kill", *specs)


def job_pids(snap: Snapshot, alloc: Allocation) -> dict[str, dict[int, int]]:
    """host -> {pid: start time} of every rank and rank parent (Open MPI daemon) that checked in."""
    where = rank_hosts(alloc)
    out: dict[str, dict[int, int]] = {}
    for r in snap.ranks:
        pids = out.setdefault(where.get(r.rank, "?"), {})
        if r.start is not None:
            pids[r.pid] = r.start
        if r.parent in procfs.DAEMON_NAMES and r.ppid and r.parent_start is not None:
            pids[r.ppid] = r.parent_start
    return out


def reap_hosts(
    remote: Remote,
    alloc: Allocation,
    python: str,
    run_id: str,
    snap: Snapshot,
    timeout: float = 15.0,
) -> tuple[HostTeardown, ...]:
    """Run the reaper on every host at once; one HostTeardown per host."""
    hosts = alloc.hosts
    pids = job_pids(snap, alloc)
    # This machine is reaped in-process (no Python to start); every other host through the
    # remote seam, each with its own PID list, all at once.
    results = remote.run_each(
        [(h, reaper_argv(python, run_id, pids.get(h.name, {}))) for h in hosts if not h.is_local],
        timeout,
    )
    return tuple(
        local_teardown(h.name, run_id, pids.get(h.name, {}))
        if h.is_local
        else _host_teardown(h.name, results.get(h.name))
        for h in hosts
    )


def local_teardown(host: str, run_id: str, pids: dict[int, int]) -> HostTeardown:
    return _teardown_row(host, reaper.reap(run_id, pids, kill=True))


def _teardown_row(host: str, data: Mapping[str, Any]) -> HostTeardown:
    """A reaper's answer ({"found": [...], "left": [[pid, cmd], ...]}) as a report row."""
    left = tuple(f"{pid} {cmd[:80]}" for pid, cmd in data.get("left", []))
    return HostTeardown(host, len(data.get("found", [])), left)


def _host_teardown(host: str, res: CmdResult | None) -> HostTeardown:
    if res is None or res.error is not None or res.exit_code != 0:
        why = "no answer" if res is None else (res.error or res.stderr.strip()[-300:] or "failed")
        return HostTeardown(host, 0, (), f"could not verify: {why}")
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return HostTeardown(
            host, 0, (), f"could not verify: unreadable reaper output {res.stdout!r:.200}"
        )
    return _teardown_row(host, data)
