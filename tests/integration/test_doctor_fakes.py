"""The doctor end to end on this machine: the real probe script (sh, the doctor's sections) runs
against the simulated cluster's fake nvidia-smi, dmesg and sysfs with one fault made each time,
and must name it with its code on the right GPU, and nothing else. No root and no network: the
same fakes answer over SSH on the simulated cluster (test_doctor_sim.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.doctor import examine
from ringtrain.probe.hostprobe import probe_argv
from ringtrain.probe.probe_parse import ProbeReport, ProbeResult, parse_probe_output
from ringtrain.probe.verdict import PreflightPolicy, evaluate
from ringtrain.sim import gpufaults, sshd
from ringtrain.sim.gpufaults import Fault
from ringtrain.sim.gpus import make_state, write_state

GPUS = 4


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakes")
    sshd.install_fake_nvidia_smi(d)
    return d


def probe_host(bin_dir: Path, where: Path, host: str, *faults: tuple[int, Fault]) -> ProbeResult:
    where.mkdir(parents=True, exist_ok=True)
    state = make_state("t", host, GPUS, "NVIDIA H100 80GB HBM3")
    for gpu, fault in faults:
        state = gpufaults.apply(state, gpu, fault, 1000.0)
    write_state(where / "gpu.json", state)
    gpufaults.write_sysfs(where / "sys", state)
    (where / "trains-on-cpu").write_text("yes\n")  # as a sim host declares: tensorflow-cpu here
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "RINGTRAIN_SIM_GPU_STATE": str(where / "gpu.json"),
           "RINGTRAIN_SIM_SYSFS": str(where / "sys"),
           "RINGTRAIN_SIM_TRAINS_ON_CPU": str(where / "trains-on-cpu")}
    out = subprocess.run(probe_argv(sys.executable), env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return parse_probe_output(host, out)


def found(r: ProbeResult, **kw: Any) -> list[tuple[str, int | None]]:
    assert r.health is not None
    return [(f.code, f.gpu) for f in examine(r.health, GPUS, iface="eth0", **kw)]


def test_a_healthy_fake_host_reads_whole_and_finds_nothing(bin_dir: Path, tmp_path: Path
                                                           ) -> None:
    r = probe_host(bin_dir, tmp_path, "gpu01")
    assert r.health is not None and len(r.health.gpus) == GPUS and r.health.gpus_note is None
    g = r.health.gpus[1]
    # the fake speaks R535: gpu_recovery_action and remapped_rows.* were dropped from the
    # query and the rows came from --query-remapped-rows
    assert (g.pcie_width, g.remap_pending, g.reset_required, g.recovery_action) == (
        16, False, False, None)
    assert r.health.xid_note is None and [n.name for n in r.health.nets] == ["eth0", "lo"]
    assert r.health.nets[0].speed_mbps == 10000
    assert found(r) == []


CASES = [
    (Fault(pcie_width=8), [("pcie-width", 1)]),
    (Fault(pcie_gen=2), [("pcie-gen", 1)]),
    (Fault(slowdown="thermal"), [("clock-slowdown", 1)]),
    (Fault(slowdown="power-brake"), [("clock-slowdown", 1)]),
    (Fault(ecc=3), [("ecc-uncorrected", 1)]),
    (Fault(retired_pending=True), [("retired-pages-pending", 1)]),
    (Fault(remap_pending=True), [("row-remap-pending", 1)]),
    (Fault(remap_failed=True), [("row-remap-failed", 1)]),
    (Fault(reset_required=True), [("gpu-reset-required", 1)]),
    (Fault(drain=True), [("gpu-drain", 1)]),
    (Fault(nvlink_down="3,5"), [("nvlink-down", 1)]),
    (Fault(nvlink_down="all"), [("nvlink-down", 1)]),
    (Fault(xid=79), [("xid-fatal", 1)]),
    (Fault(xid=13), [("xid", 1)]),
    (Fault(replays=5000), [("pcie-replays", 1)]),
    (Fault(nic_far=True), [("gpu-nic-far", None)]),
    (Fault(ib_port_down=True), [("ib-port-down", None)]),
    (Fault(link_downed=4), [("ib-link-downed", None)]),
]


@pytest.mark.parametrize(("fault", "expected"), CASES, ids=[
    "-".join(f"{k.name}={getattr(f, k.name)}" for k in dataclasses.fields(f)
             if getattr(f, k.name) not in (None, False)) for f, _ in CASES])
def test_each_fault_is_named_with_its_code_on_its_gpu(
        bin_dir: Path, tmp_path: Path, fault: Fault, expected: list[tuple[str, int | None]]
) -> None:
    r = probe_host(bin_dir, tmp_path, "gpu03", (1, fault))
    assert found(r) == expected


def test_an_xid_seen_by_the_last_check_is_not_fatal_again(bin_dir: Path, tmp_path: Path
                                                          ) -> None:
    from ringtrain.probe.doctor import baseline_of

    r = probe_host(bin_dir, tmp_path, "gpu03", (1, Fault(xid=79)))
    assert r.health is not None
    seen = baseline_of(r.health)
    assert found(r, baseline=seen) == []  # the Xid line is at 1000 s, the check after it


@pytest.fixture()
def other_run() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ,
                                                   "RINGTRAIN_RUN_ID": "20261126-other"})
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_another_runs_ranks_on_the_host(bin_dir: Path, tmp_path: Path, other_run: int) -> None:
    r = probe_host(bin_dir, tmp_path, "gpu01")
    assert r.health is not None and (other_run, "20261126-other") in r.health.runs
    assert ("other-job", None) in found(r)
    assert ("other-job", None) not in found(r, run_id="20261126-other")


def test_slow_ports_and_links_are_judged_against_the_other_hosts(bin_dir: Path, tmp_path: Path
                                                                 ) -> None:
    results = (
        probe_host(bin_dir, tmp_path / "a", "gpu01", (0, Fault(eth_speed=1000))),
        probe_host(bin_dir, tmp_path / "b", "gpu02", (0, Fault(ib_rate=25))),
        probe_host(bin_dir, tmp_path / "c", "gpu03", (0, Fault(link_downed=0))),
        probe_host(bin_dir, tmp_path / "d", "gpu04", (0, Fault(link_downed=0))),
    )
    inv = Inventory(tuple(Host(r.host, GPUS) for r in results), source="t", format="t")
    v = evaluate(inv, ProbeReport(results), PreflightPolicy(require_same_versions=False,
                                                            network_interface="eth0"))
    codes = {h.host: [j.finding.code for j in h.findings] for h in v.hosts}
    assert codes == {"gpu01": ["eth-speed-low"], "gpu02": ["ib-rate-low"], "gpu03": [],
                     "gpu04": []}
    assert v.host("gpu01").warnings[-1].startswith("[eth-speed-low] eth0 at 1 Gb/s (expected "
                                                   "10 Gb/s like the other hosts)")
    assert v.host("gpu02").warnings[-1].startswith("[ib-rate-low] mlx5_0/1 at 25 Gb/s "
                                                   "(expected 100 Gb/s like the other hosts)")
