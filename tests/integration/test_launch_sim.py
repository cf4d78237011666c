"""ringtrain launch on the simulated cluster: real Horovod ranks over SSH on 4 hosts, and the
supervision faults that need real hosts: a cut link, a killed sshd session, a killed rank.

After every fault the hosts are inspected directly (processes in each host's network namespace),
independently of ringtrain's own teardown report.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtrain import sim
from ringtrain.rank import procfs
from tests.integration.procs import parse_results, read_until, run_result
from tests.integration.simnames import G1, G2, G3, G4, SESSION_CLUSTER

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "ringtrain" / "models" / "digits.py"

ALLREDUCE = """\
import os, socket, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum)
print("HOST", hvd.rank(), socket.gethostname(), int(total.numpy()), flush=True)
"""

LOOP = """\
import os, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
from ringtrain.rank import progress
hvd.init()
step = 0
while True:
    hvd.allreduce(tf.constant([1.0]))
    step += 1
    if hvd.rank() == 0 and step % 10 == 0:
        progress.report(epoch=1, step=step)
        print("step", step, flush=True)
    time.sleep(0.05)
"""


def _argv(cluster: sim.SimCluster, tmp_path: Path, hosts: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ringtrain",
        "launch",
        "--runs-dir",
        str(tmp_path / "runs"),
        "-H",
        hosts,
        "--ssh-config",
        str(cluster.ssh_config),
        "--known-hosts",
        str(cluster.known_hosts),
        *args,
    ]


def _assert_no_job_processes(cluster: sim.SimCluster, timeout: float = 30) -> None:
    """Every job process on every host gone: at once after a verified teardown, within the
    dead-man switch's delay (heartbeat timeout + 2 s) on a host ringtrain could not reach."""
    deadline = time.monotonic() + timeout
    while _job_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_processes(cluster) == {}


def _job_processes(cluster: sim.SimCluster) -> dict[str, list[str]]:
    left = {}
    for host in cluster.names:
        found = [
            cmd
            for _, cmd in sim.host_processes(cluster.config, host)
            if "ringtrain.rank.entry" in cmd or "orted" in cmd
        ]
        if found:
            left[host] = found
    return left


def _ssh_sessions(cluster: sim.SimCluster, host: str) -> list[str]:
    return [cmd for _, cmd in sim.host_processes(cluster.config, host)
            if cmd.startswith("sshd: ") and "@" in cmd]


def test_ranks_run_on_four_distinct_hosts(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    script = tmp_path / "where.py"
    script.write_text(ALLREDUCE)
    proc = subprocess.run(
        _argv(sim_cluster, tmp_path, f"{G1}:2,{G2}:2,{G3}:2,{G4}:2", str(script)),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [
        line.split()
        for line in proc.stdout.splitlines()
        if line.startswith("[") and " HOST " in line
    ]
    hosts = {int(parts[2]): parts[3] for parts in lines}
    assert hosts == {
        0: G1,
        1: G1,
        2: G2,
        3: G2,
        4: G3,
        5: G3,
        6: G4,
        7: G4,
    }
    assert {int(parts[4]) for parts in lines} == {sum(range(8))}
    # the subnet was chosen by ringtrain, not the user; the pre-flight table is on stderr (as in
    # a dry run), so stdout holds only the job's output
    assert "network: 10.213." in proc.stderr and "network:" not in proc.stdout
    assert _job_processes(sim_cluster) == {}


def test_digits_trains_across_four_hosts(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = subprocess.run(
        _argv(
            sim_cluster, tmp_path, f"{G1}:1,{G2}:1,{G3}:1,{G4}:1", str(DIGITS), "--epochs", "3"
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = parse_results(proc.stdout)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert len({round(r["test_loss"], 6) for r in results}) == 1
    assert results[0]["size"] == 4 and results[0]["test_accuracy"] > 0.8


def _start_loop(cluster: sim.SimCluster, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    return subprocess.Popen(
        _argv(
            cluster,
            tmp_path,
            f"{G1}:1,{G2}:1,{G3}:1",
            "--heartbeat-timeout",
            "5",
            *args,
            str(script),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_steps(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Read stdout until training is under way; keep draining it in the background."""
    read_until(proc, "step 20", timeout)


def test_link_down_is_detected_and_torn_down(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = _start_loop(sim_cluster, tmp_path)
    try:
        _wait_for_steps(proc)
        cut = time.time()
        sim.set_link(sim_cluster.config, G2, up=False)
        _, err = proc.communicate(timeout=90)
        ended = time.time()
    finally:
        sim.set_link(sim_cluster.config, G2, up=True)
    result = run_result(tmp_path)
    assert proc.returncode == 21, err[-2000:]
    assert result["fault_kind"] == "host-lost" and result["fault_hosts"] == [G2], err[-2000:]
    # heartbeat timeout 5 s: detected in ~6 s, ended a few s later
    # (bench/launcher/faults.py times it)
    assert result["detected_at"] - cut < 25
    assert ended - cut < 45
    assert [t["error"] is not None for t in result["teardown"] if t["host"] == G2] == [True]
    # gpu02 could not be reached: its ranks end themselves (and their orted) once they stop
    # hearing from the launcher, heartbeat timeout + 2 s after the cut.
    _assert_no_job_processes(sim_cluster)
    # ... and the sshd session that started the orted, which would otherwise wait for TCP to
    # give up (many minutes) to report to a launcher it cannot reach
    deadline = time.monotonic() + 10
    while _ssh_sessions(sim_cluster, G2) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ssh_sessions(sim_cluster, G2) == []


def test_killed_sshd_session_ends_the_job_cleanly(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    proc = _start_loop(sim_cluster, tmp_path)
    _wait_for_steps(proc)
    orted = [pid for pid, cmd in sim.host_processes(sim_cluster.config, G3) if "orted" in cmd]
    assert len(orted) == 1
    session = procfs.parent(orted[0])
    while "sshd" not in procfs.comm(session):
        session = procfs.parent(session)
    killed = time.time()
    os.kill(session, signal.SIGKILL)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0, err[-2000:]
    assert time.time() - killed < 45  # typical: 2 s
    _assert_no_job_processes(sim_cluster)
    assert all(t["left"] == [] for t in run_result(tmp_path)["teardown"])


def test_a_killed_open_mpi_daemon_is_named_with_its_host(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    proc = _start_loop(sim_cluster, tmp_path)
    _wait_for_steps(proc)
    (orted,) = [p for p, cmd in sim.host_processes(sim_cluster.config, G3) if "orted" in cmd]
    os.kill(orted, signal.SIGKILL)
    _, err = proc.communicate(timeout=90)
    result = run_result(tmp_path)
    assert proc.returncode == 24, err[-3000:]  # not mpirun's bare 205
    assert result["fault_kind"] == "daemon-lost" and result["fault_hosts"] == [G3]
    assert f"mpirun lost its daemon (orted) on {G3}" in err
    _assert_no_job_processes(sim_cluster)


def test_a_changed_host_key_under_no_probe_says_so(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    """Without the probe, the first ssh to the hosts meets the changed key: the secrets file's
    delivery (the control token goes by file under mpirun: launch/job/deliver.py), or mpirun's own
    ssh when nothing is delivered. The report says the key changed, not a bare 'exit code
    255'."""
    script = tmp_path / "where.py"
    script.write_text(ALLREDUCE)
    sim.rotate_host_key(sim_cluster.config, G2)
    try:
        proc = subprocess.run(
            _argv(sim_cluster, tmp_path, f"{G1}:1,{G2}:1", "--no-probe", str(script)),
            capture_output=True, text=True, timeout=120, check=False,
        )
    finally:
        sim.rotate_host_key(sim_cluster.config, G2, update_known_hosts=True)
    assert proc.returncode != 0
    said = proc.stderr.split("error:", 1)[-1]
    assert re.search(fr"Host key verification failed|host key for {G2} CHANGED", said), (
        proc.stderr)
    _assert_no_job_processes(sim_cluster)


def test_horovodruns_own_ssh_checks_host_keys_and_uses_the_ssh_config(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    """horovodrun asks its ssh not to check host keys; under ringtrain its ssh is a shim with
    the cluster's ssh config (--ssh-config) and strict checking against the verified keys
    (--known-hosts). The launch runs on both hosts through it; then the shim, run exactly as
    horovodrun runs ssh, refuses gpu02 once its key has changed. (Under ringtrain the secrets
    file's delivery meets a changed key first: the launch itself stops there.)"""
    script = tmp_path / "where.py"
    script.write_text(ALLREDUCE)
    argv = _argv(sim_cluster, tmp_path, f"{G1}:1,{G2}:1", "--backend", "horovodrun", "--gloo",
                 str(script))
    # from gpu01, as horovodrun is run from a node of the cluster: its Gloo rendezvous listens
    # on the address of the interface the hosts share (eth0), which this machine lacks
    on_gpu01 = sim_cluster.ssh_argv(G1, f"cd {shlex.quote(str(tmp_path))} && "
                                    + shlex.join(argv))
    ran = subprocess.run(on_gpu01, capture_output=True, text=True, timeout=180, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sorted(line.split("HOST ")[1].split()[:2] for line in ran.stdout.splitlines()
                  if "HOST " in line) == [["0", G1], ["1", G2]], ran.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    # the shim names its ssh_config through the launcher's descriptor (rundir.py), gone with
    # the launcher: run it as written, the same config named by the run directory's path
    written = (run_dir / "attempt-1" / "bin" / "ssh").read_text()
    assert re.search(r"-F /proc/\d+/fd/\d+/attempt-1/ssh_config", written), written
    shim = tmp_path / "ssh"
    shim.write_text(re.sub(r"/proc/\d+/fd/\d+/", f"{run_dir}/", written))
    shim.chmod(0o700)
    horovodrun_ssh = [str(shim), "-o", "PasswordAuthentication=no", "-o",
                      "StrictHostKeyChecking=no", G2, "true"]  # horovod/runner/util/remote
    assert subprocess.run(horovodrun_ssh, capture_output=True, timeout=60,
                          check=False).returncode == 0
    sim.rotate_host_key(sim_cluster.config, G2)
    try:
        refused = subprocess.run(horovodrun_ssh, capture_output=True, text=True, timeout=60,
                                 check=False)
    finally:
        sim.rotate_host_key(sim_cluster.config, G2, update_known_hosts=True)
    assert refused.returncode == 255 and "Host key verification failed" in refused.stderr
    _assert_no_job_processes(sim_cluster)


def test_kill_9_of_a_remote_rank(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = _start_loop(sim_cluster, tmp_path)
    _wait_for_steps(proc)
    (rank,) = [
        pid
        for pid, cmd in sim.host_processes(sim_cluster.config, G3)
        if "ringtrain.rank.entry" in cmd and "orted" not in cmd
    ]
    killed = time.time()
    os.kill(rank, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    result = run_result(tmp_path)
    assert proc.returncode == 137, err[-2000:]
    assert result["failed_rank"] == 2 and result["failed_host"] == G3
    assert result["torn_down_at"] - killed < 25  # typical: 3 s
    assert _job_processes(sim_cluster) == {}


def test_restart_excludes_the_lost_host(sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    proc = _start_loop(sim_cluster, tmp_path, "--max-restarts", "1", "--min-np", "2")
    try:
        _wait_for_steps(proc)
        sim.set_link(sim_cluster.config, G3, up=False)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            (run_dir,) = (tmp_path / "runs").iterdir()
            if (run_dir / "attempt-2" / "plan.json").exists():
                break
            time.sleep(0.5)
        plan = json.loads((run_dir / "attempt-2" / "plan.json").read_text())
        assert [h["name"] for h in plan["hosts"]] == [G1, G2]
        assert plan["np"] == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        sim.set_link(sim_cluster.config, G3, up=True)
    result = run_result(tmp_path)
    assert result["attempts"][0]["fault_kind"] == "host-lost"
    assert result["state"] == "interrupted" and proc.returncode == 130
    _assert_no_job_processes(sim_cluster)


def test_launch_from_a_yaml_inventory_with_ssh_settings(
    sim_cluster: sim.SimCluster, tmp_path: Path
) -> None:
    """User and identity come from the inventory: the probe and mpirun's own ssh both use them."""
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(
        f"defaults: {{user: root, identity_file: {sim_cluster.identity_file}, slots: 1}}\n"
        f"groups:\n  rack1: {{labels: {{rack: r1}}, hosts: ['{SESSION_CLUSTER}-gpu[01-02]']}}\n"
        f"  rack2: {{labels: {{rack: r2}}, hosts: [{G3}]}}\n"
    )
    script = tmp_path / "where.py"
    script.write_text(ALLREDUCE)
    proc = subprocess.run(
        [sys.executable, "-m", "ringtrain", "launch", "--runs-dir", str(tmp_path / "runs"),
         "--hosts", str(inventory), "--ssh-config", str(sim_cluster.ssh_config),
         "--known-hosts", str(sim_cluster.known_hosts), str(script)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    hosts = sorted(line.split()[3] for line in proc.stdout.splitlines()
                   if line.startswith("[") and " HOST " in line)
    assert hosts == [G1, G2, G3]
    (run_dir,) = (tmp_path / "runs").iterdir()
    generated = (run_dir / "attempt-1" / "ssh_config").read_text()
    assert f'IdentityFile "{sim_cluster.identity_file}"' in generated
