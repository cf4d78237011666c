"""The ring check on the simulated cluster, with real mpirun traffic over shaped links: one host
at a quarter of the others' rate is named (not its neighbours), a launch with
``--on-slow-host exclude`` trains without it, and equal links raise no alarm."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ringtrain
from ringtrain.launch.reporter import NullReporter
from ringtrain.sim import shaping
from tests.integration.simnames import G1, G2, G3, G4

sim = pytest.importorskip("ringtrain.sim")

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]

FAST, SLOW = "400mbit", "100mbit"
HOSTS = f"{G1}:1,{G2}:1,{G3}:1,{G4}:1"


@pytest.fixture
def links(sim_cluster: Any) -> Iterator[Any]:
    shaping.set_all_link_rates(sim_cluster.config, FAST)
    try:
        yield sim_cluster
    finally:
        shaping.set_all_link_rates(sim_cluster.config, None)


def _ringtrain(cluster: Any, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command, *rest = args
    return subprocess.run(
        [sys.executable, "-m", "ringtrain", command, "--runs-dir", str(tmp_path / "runs"),
         "-H", HOSTS, "--ssh-config", str(cluster.ssh_config),
         "--known-hosts", str(cluster.known_hosts), *rest],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )


def test_check_ring_names_the_host_at_a_quarter_with_numbers_and_a_picture(
    links: Any, tmp_path: Path
) -> None:
    shaping.set_link_rate(links.config, G3, SLOW)
    proc = _ringtrain(links, tmp_path, "check", "--cpu", "--ring", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ring = json.loads(proc.stdout)["ring"]
    assert ring["slow_hosts"] == [G3] and ring["slow_links"] == [], ring
    scores = {s["host"]: s for s in ring["scores"]}
    # gpu03's pairs run at its quarter rate (100 Mbit/s = 12.5 MB/s, within the shaper's
    # slack), below half the reference (the median of the hosts' best pairs: 400 Mbit/s)
    assert 6e6 < scores[G3]["median_Bps"] < 16e6
    assert scores[G3]["median_Bps"] < 0.5 * ring["reference_Bps"]
    assert 30e6 < ring["reference_Bps"] < 60e6
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "ringcheck.json").is_file() and (run_dir / "ringcheck.png").is_file()
    # supervised like any job: without the probe's network choice the ranks still get an
    # address of this machine they can reach (not its name's 127.0.0.1)
    for log in (run_dir / "attempt-1").glob("rank.*.log"):
        assert "cannot reach the launcher" not in log.read_text(), log
    assert f"slow host {G3}" in proc.stderr
    assert "hvd.init()" not in proc.stderr  # its own mpi4py program is no Horovod script
    # GPU-to-GPU inside each host: the simulated hosts have 4 GPUs and no nccl-tests: said so
    assert {h: a["status"] for h, a in ring["gpu_to_gpu"].items()} == {
        h: "no-tool" for h in (G1, G2, G3, G4)}
    assert (f"GPU-to-GPU: {G1}: 4 GPUs, GPU-to-GPU not measured: all_reduce_perf (nccl-tests) "
            "is not on PATH") in proc.stderr


def test_equal_links_raise_no_alarm_over_repeated_checks(links: Any, tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / str(i)).mkdir()
        proc = _ringtrain(links, tmp_path / str(i), "check", "--cpu", "--ring", "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        ring = json.loads(proc.stdout)["ring"]
        assert ring["slow_hosts"] == [] and ring["slow_links"] == [], ring


_TIMES = {"duration_s", "detected_at", "torn_down_at", "teardown_s", "total_s", "milestones"}
_ADDR_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+:\d+$")


def _alike(value: Any, run_id: str) -> Any:
    """A run's JSON with its own id, its times and the control server's port taken out."""
    if isinstance(value, dict):
        return {k: _alike(v, run_id) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_alike(v, run_id) for v in value]
    if isinstance(value, str):
        return "<addr>" if _ADDR_RE.match(value) else value.replace(run_id, "<run>")
    return value


def _job_run(runs: Path, seen: set[Path]) -> Path:
    """The one new run directory that is the job's, not its ring check's."""
    (new,) = [d for d in runs.iterdir() if d not in seen and not (d / "ringcheck.json").exists()]
    return new


def test_both_doors_launch_alike(
    links: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ringtrain launch` and `ringtrain.run()` assemble a launch the same way (issue 22): with
    the ring check on and one slow host, their plan.json and result.json are equal apart from
    ids and times, and both left the slow host out. The job is a Horovod all-reduce, so the
    ring on the three hosts left trains (`launch --ring-check --on-slow-host exclude`)."""
    shaping.set_link_rate(links.config, G3, SLOW)
    (tmp_path / "where.py").write_text(
        "import socket\nimport horovod.tensorflow as hvd\nimport tensorflow as tf\nhvd.init()\n"
        "total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)\n"
        "print('HOST', hvd.rank(), socket.gethostname(), int(total.numpy()), flush=True)\n")
    runs = tmp_path / "runs"
    proc = _ringtrain(links, tmp_path, "launch", "--cpu", "--ring-check",
                      "--on-slow-host", "exclude", "where.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"ring check: excluding {G3}" in proc.stderr
    hosts = {line.split()[3] for line in proc.stdout.splitlines() if " HOST " in line}
    assert hosts == {G1, G2, G4}, proc.stdout[-2000:]
    # one pre-flight: the ring check's probe is the first attempt's (its table shown once)
    assert proc.stderr.count("ringtrain check: ") == 1, proc.stderr[-3000:]
    by_cli = _job_run(runs, set())
    job = json.loads((by_cli / "attempt-1" / "plan.json").read_text())
    assert G3 in job["spec"]["allocation"]["exclude"]  # --from reruns it without gpu03
    seen = set(runs.iterdir())
    monkeypatch.chdir(tmp_path)
    notes = NullReporter()
    result = ringtrain.run("where.py", reporter=notes, runs_dir=runs, hosts=HOSTS,
                           ssh_config=links.ssh_config, known_hosts=links.known_hosts,
                           gpu_mode="ignored", ring_check=True, on_slow_host="exclude")
    assert result.exit_code == 0, notes.notes
    assert any(n.startswith(f"ring check: excluding {G3}") for n in notes.notes), notes.notes
    by_api = _job_run(runs, seen)
    assert by_api == result.run_dir
    for name in ("attempt-1/plan.json", "result.json"):
        cli_json = _alike(json.loads((by_cli / name).read_text()), by_cli.name)
        api_json = _alike(json.loads((by_api / name).read_text()), by_api.name)
        assert cli_json == api_json, name
    plan = json.loads((by_api / "attempt-1" / "plan.json").read_text())
    assert [h["name"] for h in plan["hosts"]] == [G1, G2, G4]
    # the same events, written below both doors (launch/lifecycle.py): its status lines
    # depend on timing, so the steps of the launch are compared
    steps = ("run ", "attempt ", "teardown", "job succeeded")
    assert _events(by_cli, steps) == _events(by_api, steps) != []


def _events(run_dir: Path, steps: tuple[str, ...]) -> list[str]:
    """events.jsonl's messages that start with one of ``steps``, ids and numbers taken out."""
    messages = [json.loads(line)["message"]
                for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [re.sub(r"\d+(\.\d+)?", "N", m.replace(run_dir.name, "<run>"))
            for m in messages if m.startswith(steps)]
