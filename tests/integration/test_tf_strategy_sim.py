"""--strategy tf-multiworker on the simulated cluster: a script written from TensorFlow's
multi-worker Keras tutorial (nothing of ringtrain in it) trains across two hosts with the
TF_CONFIG ringtrain gives each task, and a killed worker is a job failure named and torn down
like a rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.rank import procfs
from tests.integration.procs import killed_on_failure, run_result
from tests.integration.simnames import G1, G2, G3

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]
SCRIPT = Path(__file__).parent / "user_scripts" / "mwms_keras_style.py"


def _argv(cluster: sim.SimCluster, tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
            "-H", f"{G1}:2,{G2}:2", "--ssh-config", str(cluster.ssh_config), "--known-hosts",
            str(cluster.known_hosts), "--strategy", "tf-multiworker", *args]


def _results(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in stdout.splitlines()
            if "RESULT {" in line]


def _job_processes(cluster: sim.SimCluster) -> list[str]:
    return [f"{host}: {cmd}" for host in cluster.names
            for _, cmd in sim.host_processes(cluster.config, host)
            if "ringtrain.rank.entry" in cmd or "orted" in cmd]


def test_multiworker_mirrored_trains_across_two_hosts(sim_cluster: sim.SimCluster,
                                                      tmp_path: Path) -> None:
    proc = subprocess.run(_argv(sim_cluster, tmp_path, str(SCRIPT), "6"), capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = _results(proc.stdout)
    assert sorted(r["task"]["index"] for r in results) == [0, 1, 2, 3]  # type: ignore[index]
    assert {r["task"]["type"] for r in results} == {"worker"}  # type: ignore[index]
    assert all(r["workers"] == 4 for r in results)
    assert all(r["accuracy"] > 0.85 for r in results), results  # type: ignore[operator]
    assert len({r["weights"] for r in results}) == 1  # one model, mirrored
    assert "hvd.init" not in proc.stderr  # no Horovod warning for a TF strategy
    result = run_result(tmp_path)
    assert result["state"] == "succeeded"
    (attempt,) = (p for p in next((tmp_path / "runs").iterdir()).iterdir() if p.is_dir()
                  and p.name.startswith("attempt-"))
    plan = json.loads((attempt / "plan.json").read_text())
    assert plan["spec"]["strategy"] == "tf-multiworker"
    assert _job_processes(sim_cluster) == []


def _kill_rank_in_epoch_3(cluster: sim.SimCluster, argv: list[str],
                         rank: int) -> tuple[int, str]:
    """Start the launch, SIGKILL ``rank`` (on gpu02) once epoch 3 begins; the launcher's exit
    status and stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with killed_on_failure(proc):
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            if "Epoch 3/" in line or time.monotonic() > deadline:
                break
        assert time.monotonic() < deadline, "training did not start"
        (pid,) = [pid for pid, cmd in sim.host_processes(cluster.config, G2)
                  if "ringtrain.rank.entry" in cmd and "orted" not in cmd
                  and procfs.environ_has(pid, f"OMPI_COMM_WORLD_RANK={rank}".encode())]
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _assert_torn_down(cluster: sim.SimCluster) -> None:
    deadline = time.monotonic() + 30
    while _job_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_processes(cluster) == []


def test_a_killed_worker_is_a_job_failure_named_and_torn_down(sim_cluster: sim.SimCluster,
                                                              tmp_path: Path) -> None:
    code, err = _kill_rank_in_epoch_3(sim_cluster,
                                      _argv(sim_cluster, tmp_path, str(SCRIPT), "400"), 2)
    result = run_result(tmp_path)
    assert code == 137, err[-3000:]
    assert result["failed_host"] == G2 and result["failed_rank"] == 2, result
    assert result["failed_task"] == "worker:2"
    _assert_torn_down(sim_cluster)


PS_SCRIPT = Path(__file__).parent / "user_scripts" / "ps_keras_style.py"


def test_parameter_server_strategy_trains_and_the_servers_end_with_the_chief(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    argv = _argv(sim_cluster, tmp_path, "--ps", "2", str(PS_SCRIPT), "6")
    argv[argv.index("tf-multiworker")] = "tf-ps"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (chief,) = _results(proc.stdout)  # only the chief trains; servers print nothing
    assert chief["task"] == {"type": "chief", "index": 0}, chief
    assert chief["accuracy"] > 0.85, chief  # type: ignore[operator]
    # the variables live on both parameter servers, not on the chief
    assert chief["devices"] == [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in (0, 1)]
    assert "the chief finished: ending the ps and worker tasks" in proc.stderr
    result = run_result(tmp_path)
    assert result["state"] == "succeeded", result
    (run_dir,) = (tmp_path / "runs").iterdir()
    plan = json.loads((run_dir / "attempt-1" / "plan.json").read_text())
    assert plan["np"] == 7  # 4 workers, a chief, 2 ps
    assert _job_processes(sim_cluster) == []


def test_a_killed_parameter_server_is_a_job_failure_named_and_torn_down(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    argv = _argv(sim_cluster, tmp_path, "--ps", "2", str(PS_SCRIPT), "400")
    argv[argv.index("tf-multiworker")] = "tf-ps"
    # rank 4, gpu02's first, is ps:1 (chief, ps:0 and two workers are ranks 0-3 on gpu01)
    code, err = _kill_rank_in_epoch_3(sim_cluster, argv, 4)
    result = run_result(tmp_path)
    assert code == 137, err[-3000:]
    assert result["failed_host"] == G2 and result["failed_rank"] == 4, result
    assert result["failed_task"] == "ps:1"
    assert "rank 4 is TensorFlow task ps:1" in err, err[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    show = subprocess.run([sys.executable, "-m", "ringtrain", "runs", "show", str(run_dir)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "strategy tf-ps (ps 2)" in show.stdout, show.stdout + show.stderr
    assert f"first failing rank: 4, TensorFlow task ps:1 on {G2}" in show.stdout
    _assert_torn_down(sim_cluster)


DIGITS_TF = Path(__file__).resolve().parents[2] / "ringtrain" / "models" / "digits_tf.py"


@pytest.mark.parametrize(("strategy", "extra", "fail_rank"), [
    ("tf-multiworker", (), "1"),  # worker 1 dies; worker 0 committed epoch 2
    ("tf-ps", ("--ps", "1"), "0"),  # the chief (coordinator) dies
])
def test_digits_resumes_from_its_checkpoint_after_a_failure(
        sim_cluster: sim.SimCluster, tmp_path: Path, strategy: str, extra: tuple[str, ...],
        fail_rank: str) -> None:
    """The public training API under TF strategies: rank 0 commits every epoch, a task dies in
    epoch 3, ringtrain restarts the job and every worker resumes from epoch 2."""
    argv = _argv(sim_cluster, tmp_path, *extra, "--max-restarts", "1", str(DIGITS_TF),
                 "--epochs", "5", "--fail-at-epoch", "3", "--fail-rank", fail_rank,
                 "--target-accuracy", "0.85")
    argv[argv.index("-H") + 1] = f"{G1}:1,{G2}:1"
    argv[argv.index("tf-multiworker")] = strategy
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [r for r in _results(proc.stdout) if "test_accuracy" in r]
    assert results and all(r["strategy"] == strategy for r in results)
    assert all(r["resumed_from"] == {"epoch": 2, "step": r["resumed_from"]["step"]}  # type: ignore[index]
               for r in results), results
    assert len({r["test_loss"] for r in results}) == 1  # the workers agree (MWMS: two)
    assert len(results) == (2 if strategy == "tf-multiworker" else 1)
    assert "fault injection: exiting at epoch 3" in proc.stdout
    assert run_result(tmp_path)["attempt"] == 2
    assert _job_processes(sim_cluster) == []


def test_a_taken_task_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The dry run (and a launch) asks every host whether its tasks' ports are free."""
    import socket

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        base = [sys.executable, "-m", "ringtrain", "launch", "--dry-run", "--cpu", "--runs-dir",
                str(tmp_path / "runs"), "-H", "localhost:2", "--strategy", "tf-multiworker"]
        refused = subprocess.run([*base, "--tf-port", str(port - 1), str(SCRIPT)],
                                 capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"TensorFlow task ports in use: localhost:{port}" in refused.stderr
    assert "--tf-port" in refused.stderr
    free = subprocess.run([*base, "--tf-port", str(port - 1), str(SCRIPT)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert free.returncode == 0, free.stderr[-2000:]
    assert f"worker:1 at localhost:{port}" in free.stdout


def test_parameter_servers_on_hosts_of_their_own(sim_cluster: sim.SimCluster,
                                                 tmp_path: Path) -> None:
    """--ps-hosts own: two workers on gpu01 and gpu02, the ps task alone on gpu03."""
    argv = _argv(sim_cluster, tmp_path, "--ps", "1", "--ps-hosts", "own", "-np", "2",
                 str(PS_SCRIPT), "3")
    argv[argv.index("tf-multiworker")] = "tf-ps"
    argv[argv.index("-H") + 1] = f"{G1}:1,{G2}:1,{G3}:1"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (chief,) = _results(proc.stdout)
    assert chief["devices"] == ["/job:ps/replica:0/task:0/device:CPU:0"]
    (run_dir,) = (tmp_path / "runs").iterdir()
    plan = json.loads((run_dir / "attempt-1" / "plan.json").read_text())
    tf_cluster = json.loads(plan["env"]["RINGTRAIN_TF_CLUSTER"])["cluster"]
    assert tf_cluster["ps"] == [f"{G3}:23456"] and len(tf_cluster["worker"]) == 2
    assert not any(a.startswith(f"{G3}:") for a in tf_cluster["worker"] + tf_cluster["chief"])
    assert _job_processes(sim_cluster) == []


def test_workers_waiting_for_a_late_peer_are_not_reported_silent(sim_cluster: sim.SimCluster,
                                                                  tmp_path: Path) -> None:
    """TensorFlow holds the GIL while a worker waits for its peers in
    MultiWorkerMirroredStrategy(), so the waiting ranks' heartbeats stop. One worker starting
    25 s late (a slow import on a loaded host) must be waited for, not reported as a silent
    rank or a lost host."""
    late = tmp_path / "late_worker.py"
    late.write_text(
        "import json, os, runpy, sys, time\n"
        "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 3:\n"
        "    time.sleep(25)\n"
        f"sys.argv = [{str(SCRIPT)!r}, '2']\n"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    proc = subprocess.run(_argv(sim_cluster, tmp_path, str(late)), capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert sorted(r["task"]["index"] for r in _results(proc.stdout)) == [0, 1, 2, 3]  # type: ignore[index]
    assert "forming the TensorFlow cluster" in proc.stderr  # the wait is shown, not hidden
    assert run_result(tmp_path)["state"] == "succeeded"
