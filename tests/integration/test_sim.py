"""The simulated cluster (ringtrain.sim): real namespaces, sshd, ssh and mpirun.

The first block tests the fake nvidia-smi's output byte for byte (pure, fast); the rest runs
against the session's ``sim_cluster`` (see conftest.py) or, for up/down, a cluster of its own.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain import sim
from ringtrain.cli import cli
from ringtrain.sim import netns
from ringtrain.sim.fake_nvidia_smi import DRIVER_FAILED, apply_holders, render
from ringtrain.sim.gpus import make_state
from ringtrain.sim.proc import alive
from tests.integration.simnames import G1, G2, G3, G4

from .conftest import sim_unavailable

H100 = "NVIDIA H100 80GB HBM3"
FIELDS = ("index,name,uuid,memory.total,memory.used,utilization.gpu,driver_version,pci.bus_id,"
          "temperature.gpu")


def smi(argv: str, state: dict | None) -> tuple[str, int]:
    return render(argv.split(), state)


# ---- the fake nvidia-smi, byte for byte -------------------------------------------------------

STATE = make_state("c", "gpu01", 2, H100)
U0, U1 = STATE["gpus"][0]["uuid"], STATE["gpus"][1]["uuid"]
T0, T1 = STATE["gpus"][0]["temperature_gpu"], STATE["gpus"][1]["temperature_gpu"]


def test_query_csv_noheader_nounits() -> None:
    out, rc = smi(f"--query-gpu={FIELDS} --format=csv,noheader,nounits", STATE)
    assert rc == 0
    assert out == (
        f"0, {H100}, {U0}, 81559, 0, 0, 535.104.05, 00000000:18:00.0, {T0}\n"
        f"1, {H100}, {U1}, 81559, 0, 0, 535.104.05, 00000000:2A:00.0, {T1}\n"
    )


def test_query_with_header_and_units() -> None:
    out, rc = smi("--query-gpu=index,name,memory.total,utilization.gpu,temperature.gpu "
                  "--format=csv", STATE)
    assert rc == 0
    assert out.splitlines() == [
        "index, name, memory.total [MiB], utilization.gpu [%], temperature.gpu",
        f"0, {H100}, 81559 MiB, 0 %, {T0}",
        f"1, {H100}, 81559 MiB, 0 %, {T1}",
    ]
    out, _ = smi("--query-gpu=gpu_name,memory.used --format=csv,nounits", STATE)
    assert out.splitlines()[:2] == ["name, memory.used [MiB]", f"{H100}, 0"]
    out, _ = smi("--query-gpu=memory.total --format=csv,noheader", STATE)
    assert out == "81559 MiB\n81559 MiB\n"


def test_uuid_and_list_format() -> None:
    assert all(len(p) == n for p, n in zip(U0.split("-")[1:], (8, 4, 4, 4, 12), strict=True))
    assert U0.startswith("GPU-") and U0 != U1
    out, rc = smi("-L", STATE)
    assert (out, rc) == (f"GPU 0: {H100} (UUID: {U0})\nGPU 1: {H100} (UUID: {U1})\n", 0)
    out, _ = smi("-i 1 --query-gpu=index --format=csv,noheader", STATE)
    assert out == "1\n"


def test_failures_match_the_real_tool() -> None:
    assert smi("-L", {**STATE, "mode": "fail"}) == (DRIVER_FAILED, 9)
    assert DRIVER_FAILED == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n\n")
    assert smi("-L", None) == (DRIVER_FAILED, 9)
    assert smi("-L", make_state("c", "gpu01", 0, H100)) == ("No devices were found\n", 6)
    assert smi("--query-gpu=index,bogus --format=csv", STATE) == (
        'Field "bogus" is not a valid field to query.\n\n', 2)


def test_no_process_holds_a_fresh_fake_gpu() -> None:
    assert smi("--query-compute-apps=pid,used_memory --format=csv", STATE) == (
        "pid, used_gpu_memory [MiB]\n", 0)
    assert smi("--query-compute-apps=pid --format=csv,noheader,nounits", STATE) == ("", 0)


def test_a_process_holds_gpu_memory_until_its_context_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder counts in memory.used and is a compute app while it lives; once it has exited
    its memory stays used for its release delay, counted from the first call that saw it gone
    (a driver tearing a dead process's context down), then the entry is removed."""
    import copy
    import sys

    state_file = tmp_path / "gpu.json"
    state_file.write_text(json.dumps(STATE))
    monkeypatch.setenv("RINGTRAIN_SIM_GPU_STATE", str(state_file))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from ringtrain.sim.gpus import hold_memory; "
        "hold_memory(1, 30000, release_s=2.0); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        procs = tmp_path / "gpu-procs"

        def look(now: float) -> tuple[list[int], list[dict]]:
            state = copy.deepcopy(STATE)
            apply_holders(state, procs, now)
            return [g["memory_used"] for g in state["gpus"]], state["apps"]

        used, apps = look(1000.0)
        assert used == [0, 30000] and [(a["pid"], a["index"]) for a in apps] == [(holder.pid, 1)]
        out, rc = smi("--query-compute-apps=pid,gpu_uuid,used_memory --format=csv", {
            **STATE, "apps": apps})
        assert (out, rc) == ("pid, gpu_uuid, used_gpu_memory [MiB]\n"
                             f"{holder.pid}, {U1}, 30000 MiB\n", 0)
    finally:
        holder.kill()
        holder.wait()
    assert look(1000.0) == ([0, 30000], [])  # gone: first seen now, released 2 s later
    assert look(1001.9) == ([0, 30000], [])
    assert look(1002.0) == ([0, 0], []) and list(procs.iterdir()) == []


# ---- a running cluster ------------------------------------------------------------------------



def ssh(c: sim.SimCluster, host: str, command: str, timeout: float = 30
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(c.ssh_argv(host, command), capture_output=True, text=True,
                          timeout=timeout, check=False)


def remote_version(c: sim.SimCluster, host: str, dist: str) -> str:
    code = (f"import importlib.metadata as m\ntry: print(m.version({dist!r}))\n"
            "except m.PackageNotFoundError: print('missing')")
    done = ssh(c, host, f"python -c {shlex.quote(code)}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.ssh
@pytest.mark.slow
def test_every_host_has_its_own_name_address_and_no_way_out(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    procs = {h: subprocess.Popen(c.ssh_argv(h, "hostname; ip -4 -o addr show; ip route; "
                                            f"getent hosts {G2}"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in c.names}
    for host, proc in procs.items():
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        lines = out.splitlines()
        assert lines[0] == host
        assert f"{c.addresses[host]}/24" in out and "127.0.0.1/8" in out
        assert "default" not in out  # nothing routes off the simulated subnet
        assert lines[-1].split() == [c.addresses[G2], G2]


@pytest.mark.ssh
@pytest.mark.slow
def test_fake_nvidia_smi_over_ssh(sim_cluster: sim.SimCluster) -> None:
    done = ssh(sim_cluster, G3,
               f"nvidia-smi --query-gpu={FIELDS} --format=csv,noheader,nounits")
    assert done.returncode == 0, done.stderr
    rows = [line.split(", ") for line in done.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert {(r[1], r[3], r[6]) for r in rows} == {(H100, "81559", "535.104.05")}
    assert len({r[2] for r in rows}) == 4
    other = ssh(sim_cluster, G4, "nvidia-smi -L").stdout
    assert not {r[2] for r in rows} & {line.split("UUID: ")[1][:-1] for line in other.splitlines()}


@pytest.mark.ssh
@pytest.mark.slow
def test_set_gpus_count_model_fail_and_ok(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    query = "nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits"
    try:
        sim.set_gpus(c.config, G3, 2, model="NVIDIA A100-SXM4-80GB")
        assert ssh(c, G3, query).stdout == (
            "0, NVIDIA A100-SXM4-80GB, 81920\n1, NVIDIA A100-SXM4-80GB, 81920\n")
        sim.set_gpus(c.config, G3, "fail")
        done = ssh(c, G3, query)
        assert (done.stdout, done.returncode) == (DRIVER_FAILED, 9)
        assert ssh(c, G2, query).returncode == 0  # only gpu03 is broken
        sim.set_gpus(c.config, G3, "ok")
        assert ssh(c, G3, query).stdout.count("A100") == 2
    finally:
        sim.set_gpus(c.config, G3, 4, model=H100)
    assert ssh(c, G3, query).stdout.count(H100) == 4


@pytest.mark.ssh
@pytest.mark.slow
def test_link_down_makes_ssh_fail_within_connect_timeout(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    sim.set_link(c.config, G4, up=False)
    try:
        started = time.monotonic()
        done = ssh(c, G4, "true")
        elapsed = time.monotonic() - started
        assert done.returncode == 255
        assert G4 in done.stderr or c.addresses[G4] in done.stderr
        assert elapsed < 20  # ConnectTimeout 5 in the generated ssh config, not TCP's minutes
        assert not next(h for h in sim.status(c.config).hosts if h.name == G4).link_up
    finally:
        sim.set_link(c.config, G4, up=True)
    assert ssh(c, G4, "true").returncode == 0


@pytest.mark.ssh
@pytest.mark.slow
def test_rotated_host_key_is_refused_by_strict_ssh(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    known = c.known_hosts.read_text()
    sim.rotate_host_key(c.config, G1)
    try:
        done = ssh(c, G1, "true")
        assert done.returncode == 255
        assert "Host key verification failed" in done.stderr
        assert c.known_hosts.read_text() == known
    finally:
        sim.rotate_host_key(c.config, G1, update_known_hosts=True)
    assert ssh(c, G1, "true").returncode == 0


@pytest.mark.ssh
@pytest.mark.slow
def test_stopped_sshd_refuses_and_processes_are_found_by_namespace(
        sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    host = c.host(G2)
    before = dict(sim.host_processes(c.config, G2))
    pid = int(host.sshd_pid_file.read_text())
    assert "sshd" in before[pid] and any("holder.py" in cmd for cmd in before.values())
    assert sim.stop_sshd(c.config, G2)
    try:
        assert "Connection refused" in ssh(c, G2, "true").stderr
        assert pid not in dict(sim.host_processes(c.config, G2))
    finally:
        sim.start_sshd(c.config, G2)
    assert ssh(c, G2, "true").returncode == 0


@pytest.mark.ssh
@pytest.mark.slow
def test_fake_versions_are_per_host(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    try:
        local = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        local = "missing"
    sim.set_versions(c.config, G2, {"horovod": "0.27.0", "mpirun": "4.0.3"})
    try:
        assert remote_version(c, G2, "horovod") == "0.27.0"
        assert remote_version(c, G1, "horovod") == local
        assert ssh(c, G2, "mpirun --version").stdout.startswith("mpirun (Open MPI) 4.0.3\n")
        st = next(h for h in sim.status(c.config).hosts if h.name == G2)
        assert dict(st.versions) == {"horovod": "0.27.0", "mpirun": "4.0.3"}
    finally:
        sim.clear_versions(c.config, G2)
    assert remote_version(c, G2, "horovod") == local


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="apt-get install -y openmpi-bin")
def test_mpirun_across_two_hosts(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    argv = ["mpirun", "--allow-run-as-root", *c.mpirun_mca_args, "-H", f"{G1}:1,{G2}:1",
            "-np", "2", "hostname"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == [G1, G2]


@pytest.mark.ssh
@pytest.mark.slow
def test_up_again_is_a_no_op_and_cli_status(sim_cluster: sim.SimCluster) -> None:
    c = sim_cluster
    pids = [h.sshd_pid for h in sim.status(c.config).hosts]
    assert sim.up(c.config) == c
    assert [h.sshd_pid for h in sim.status(c.config).hosts] == pids
    result = CliRunner().invoke(cli, ["sim", "status", "--json", "--name", c.name,
                                      "--state-dir", str(c.state_dir)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [(h["name"], h["gpus"], h["link_up"]) for h in data["hosts"]] == [
        (n, 4, True) for n in c.names]
    assert c.hostfile.read_text() == "".join(f"{n} slots=4\n" for n in c.names)


def test_cli_refuses_without_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(cli, ["sim", "up", "--name", "nr", "--state-dir", str(tmp_path)])
    assert result.exit_code == 8
    assert "needs root" in result.stderr and "fix: run it as root" in result.stderr


# ---- a cluster of its own: up in time, down leaves nothing ------------------------------------

def leftovers(cfg: sim.SimConfig, pids: list[int]) -> list[str]:
    found = netns.existing_netns(cfg.name) + netns.existing_links(cfg.name)
    found += [f"pid {p}" for p in pids if alive(p)]
    found += [line for line in Path("/etc/hosts").read_text().splitlines() if cfg.name in line]
    found += [line for line in Path("/proc/mounts").read_text().splitlines()
              if f"/{cfg.name}-" in line]
    return found


@pytest.mark.ssh
@pytest.mark.slow
def test_up_then_down_leaves_nothing(tmp_path: Path) -> None:
    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    cfg = sim.SimConfig(name=f"d{os.getpid()}", hosts=4, state_dir=tmp_path / "sim")
    leftover = cfg.netns(cfg.host_names[2])  # a half-built leftover
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    try:
        started = time.monotonic()
        c = sim.up(cfg)
        assert time.monotonic() - started < 60  # not hung; bench/launcher/probe_scaling prints it
        done = ssh(c, c.names[0], "nohup sleep 600 >/dev/null 2>&1 & echo $!")
        assert done.returncode == 0, done.stderr
        pids = [p for h in c.names for p, _ in sim.host_processes(cfg, h)]
        assert int(done.stdout) in pids and len(pids) >= 2 * len(c.names) + 1
    finally:
        sim.down(cfg)
    assert leftovers(cfg, pids) == []
    assert not sim.status(cfg).up
    sim.down(cfg, purge=True)  # idempotent
    assert not (tmp_path / "sim").exists()


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.s3
def test_cli_up_with_s3_then_down(tmp_path: Path) -> None:
    """`ringtrain sim up --s3` (what the demo runs): the S3 server answers on the bridge
    address the hosts reach; `sim down` stops it with the cluster."""
    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    name, state = f"s{os.getpid()}", str(tmp_path / "sim")
    up = CliRunner().invoke(cli, ["sim", "up", "--name", name, "--hosts", "2", "--s3",
                                  "--state-dir", state])
    try:
        assert up.exit_code == 0, up.output
        match = re.search(r"^s3 \S+: (http://[\d.]+:\d+), bucket (\S+)", up.output, re.M)
        assert match, up.output
        endpoint = match.group(1)
        cluster = sim.load(sim.SimConfig(name=name, state_dir=Path(state)))
        assert cluster is not None and f"//{cluster.bridge_address}:" in endpoint
        assert "\n  export " in up.output and "ringtrain launch --checkpoint s3://" in up.output
        assert _http_status(endpoint) is not None  # an S3 answer (any status), not a refusal
    finally:
        down = CliRunner().invoke(cli, ["sim", "down", "--name", name, "--purge",
                                        "--state-dir", state])
    assert down.exit_code == 0 and f"s3 {name}: stopped" in down.output, down.output
    assert _http_status(endpoint) is None


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None
