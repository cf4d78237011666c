"""The GPU and NIC doctor: parsers against real outputs (tests/unit/golden/probe/doctor/, and
the H200 probe captures), and each check against a value that trips it and one that does not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ringtrain.errors import UsageError
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.doctor import (
    BY_CODE,
    CHECKS,
    FATAL_XIDS,
    Baseline,
    Fleet,
    baseline_of,
    examine,
)
from ringtrain.probe.doctor_parse import (
    ALL_LINKS,
    GpuHealth,
    HostHealth,
    IbPort,
    NetLink,
    Xid,
    bus_key,
    parse_health,
    parse_nvlink,
    parse_replays,
    parse_topology,
    parse_xid,
)
from ringtrain.probe.doctor_policy import BadHostPolicy, parse_on_bad_host
from ringtrain.probe.probe_parse import ProbeReport, parse_probe_output
from ringtrain.probe.verdict import HostStatus, PreflightPolicy, evaluate
from tests.golden import GOLDEN_DIR

DOC = GOLDEN_DIR / "probe" / "doctor"


def _read(name: str) -> str:
    return (DOC / name).read_text()


def _real(name: str) -> HostHealth:
    text = (GOLDEN_DIR / "probe" / f"{name}.out").read_text()
    health = parse_probe_output("gpu01", text).health
    assert health is not None
    return health


def codes(findings: object) -> list[str]:
    return [f.code for f in findings]  # type: ignore[attr-defined]


# -- real outputs: read right, and no false alarm -------------------------------------------

@pytest.mark.parametrize("name", ["h200_real_idle", "h200_real_busy"])
def test_real_h200_probe_reads_every_field_and_finds_nothing(name: str) -> None:
    h = _real(name)
    (g,) = h.gpus
    assert (g.index, g.bus_id, g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (
        0, "00000000:00:06.0", 5, 5, 16, 16)
    assert g.ecc_enabled is True and g.ecc_uncorrected == 0
    assert (g.remap_pending, g.remap_failed, g.recovery_action) == (False, False, "None")
    # R580 has no reset_status.* (dropped and asked again) and no page retirement on Hopper
    assert g.reset_required is None and g.retired_pending is None
    assert h.replays == {"00:06": 0}
    assert h.links_down == {} and h.links_up == {} and h.xids == () and h.xid_note is None
    assert h.boot_id and h.uptime_s and h.uptime_s > 0
    assert [n.name for n in h.nets] == ["eth0", "ifb0", "ifb1", "lo"]
    assert h.nets[0].speed_mbps is None  # virtio says -1: unknown, never "slow"
    assert examine(h, 1, iface="eth0") == ()


def test_real_h200_with_the_images_python_sees_another_runs_rank() -> None:
    """Captured with the probe's real argv and the image's python3 (PyTorch, no TensorFlow),
    a PyTorch matmul loop started with RINGTRAIN_RUN_ID=otherrun-1 running."""
    idle, busy = _real("h200_real_torchpy_idle"), _real("h200_real_torchpy_busy")
    assert idle.runs == () and [run for _, run in busy.runs] == ["otherrun-1"]
    assert examine(idle, 1, iface="eth0") == ()


def test_real_h200_busy_is_judged_busy_not_idle() -> None:
    idle, busy = _real("h200_real_idle").gpus[0], _real("h200_real_busy").gpus[0]
    assert idle.event_reasons == 0x1 and idle.utilization_pct == 0
    assert busy.event_reasons == 0 and busy.utilization_pct == 100
    assert busy.pcie_gen == busy.pcie_gen_max  # so no pcie-gen finding while busy either


def test_real_h200_q_and_dmesg_refused_and_invalid_field() -> None:
    assert parse_replays(_read("q_h200_580.txt")) == {"00:06": 1}
    xids, note, _, _ = parse_xid(_read("dmesg_refused_h200.txt"), 1)
    assert xids == () and note == "dmesg: read kernel buffer failed: Operation not permitted"
    gpus, said = parse_health("#fields index,reset_status.reset_required\n"
                              + _read("invalid_field_h200_580.txt"), 2)
    assert gpus == () and said == ('Field "reset_status.reset_required" is not a valid field '
                                   "to query.")


def test_health_query_of_an_older_driver_takes_remapped_rows_from_their_own_query() -> None:
    text = ("#fields index,pci.bus_id,remapped_rows.pending\n"  # not what R535 does: see below
            "0, 00000000:07:00.0, No\n")
    assert parse_health(text, 0)[0][0].remap_pending is False
    r535 = ("#fields index,pci.bus_id,ecc.errors.uncorrected.volatile.total\n"
            "0, 00000000:07:00.0, 0\n1, 00000000:0F:00.0, 0\n"
            "#remap 00000000:07:00.0, No, No\n#remap 00000000:0F:00.0, Yes, No\n")
    gpus, _ = parse_health(r535, 0)
    assert [(g.remap_pending, g.remap_failed) for g in gpus] == [(False, False), (True, False)]
    assert codes(examine(HostHealth(gpus=gpus), 2)) == ["row-remap-pending"]


@pytest.mark.parametrize(("name", "legend", "gpu0_to_first"), [
    ("topo_h200_580.txt", {}, None),
    ("topo_a100x8_17nic_535.txt", {"mlx5_2": "NIC0"}, "PXB"),
    ("topo_a10x4_pcie.txt", {"mlx5_0": "NIC0"}, "SYS"),
    ("topo_rtx6000ada_x4_575.txt", {"mlx5_0": "NIC0"}, "NODE"),
    ("topo_v100x8_old_440.txt", {"mlx5_0": "mlx5_0"}, "NODE"),
    ("topo_h100x8_570.txt", {"mlx5_0": "NIC0"}, "PIX"),
    ("topo_h100x8_tabs_cut.txt", {}, "SYS"),
])
def test_topology_real_layouts(name: str, legend: dict[str, str], gpu0_to_first: str | None
                               ) -> None:
    t = parse_topology(_read(name), 0)
    assert t is not None
    assert legend.items() <= t.nic_of.items()
    first = next(iter(legend.values()), "NIC0")
    assert t.relation.get((0, first)) == gpu0_to_first
    assert t.relation.get((0, "GPU0")) == "X"


def test_gpu_far_from_the_jobs_nic_is_named_with_the_gpus() -> None:
    t = parse_topology(_read("topo_a100x8_17nic_535.txt"), 0)
    h = HostHealth(gpus=tuple(GpuHealth(i) for i in range(8)), topology=t,
                   nets=(NetLink("ib0", None, "up", "mlx5_2"),))
    (f,) = examine(h, 8, iface="ib0")
    assert f.code == "gpu-nic-far" and f.measured.startswith("GPU 2, 3, 4, 5, 6, 7 reach mlx5_2")
    assert examine(h, 2, iface="ib0") == ()  # the two GPUs the ranks use are near it
    assert examine(h, 8, iface="eth0") == ()  # not an RDMA interface: nothing to compare
    # with every NIC active, each GPU has one behind its own PCIe switch (PXB): nothing far
    ports = tuple(IbPort(dev, "1", "ACTIVE", "LinkUp", 200.0, "InfiniBand", 0)
                  for dev in t.nic_of)  # type: ignore[union-attr]
    assert examine(replace(h, ports=ports), 8, iface="ib0") == ()


def test_an_h100_with_a_nic_far_from_every_gpu_is_not_a_false_alarm() -> None:
    t = parse_topology(_read("topo_h100x8_570.txt"), 0)
    assert t is not None
    ports = tuple(IbPort(dev, "1", "ACTIVE", "LinkUp", 400.0, "InfiniBand", 0)
                  for dev in t.nic_of)
    h = HostHealth(gpus=tuple(GpuHealth(i) for i in range(8)), topology=t, ports=ports,
                   nets=(NetLink("ib0", None, "up", "mlx5_0"),))
    assert examine(h, 8, iface="ib0") == ()


def test_nvlink_real_outputs() -> None:
    down, up = parse_nvlink(_read("nvlink_v100x8_inactive.txt"), 0)
    assert down == {3: (3, 5), 4: (1,), 5: (0, 4), 6: (1,)} and up[0] == 6 and up[3] == 4
    h = HostHealth(gpus=tuple(GpuHealth(i) for i in range(8)), links_down=down, links_up=up)
    found = examine(h, 8)
    assert [(f.code, f.gpu) for f in found] == [("nvlink-down", g) for g in (3, 4, 5, 6)]
    assert found[0].measured == "NVLink 3, 5 inactive (4 active)"
    down, up = parse_nvlink(_read("nvlink_a100_all_inactive.txt"), 0)
    assert down == {6: (ALL_LINKS,)} and up == {}
    h = HostHealth(gpus=tuple(GpuHealth(i) for i in range(8)), links_down=down)
    assert [(f.code, f.gpu) for f in examine(h, 8)] == [("nvlink-down", 6)]
    assert parse_nvlink(_read("nvlink_a100_good.txt"), 0) == ({}, {7: 12})
    assert parse_nvlink("", 0) == ({}, {})  # the H200 (PCIe, no NVLink) prints nothing


@pytest.mark.parametrize(("name", "found"), [
    ("xid_dmesg_T_h100_535.txt", [(43, "00:05", None), (43, "00:05", None),
                                  (31, "00:07", None), (94, "00:08", None)]),
    ("xid_a800_535.txt", [(13, "43:00", 93297.027938)] * 3),
    ("xid_595_open.txt", [(31, "01:00", 365.969681)]),
    ("xid_418_old.txt", [(31, "01:00", 31543.449443)] + [(13, "01:00", None)] * 4
     + [(32, "01:00", 31609.615516)]),
    ("xid_syslog.txt", [(13, "41:00", 82659.755847)] * 3),
    ("xid_journal_590.txt", [(45, "dc:00", None), (45, "ed:00", None), (45, "ba:00", None)]),
])
def test_xid_lines_real_formats(name: str, found: list[tuple[int, str, float | None]]) -> None:
    xids, note, _, _ = parse_xid(_read(name), 0)
    assert note is None
    got = [(x.code, x.bus, x.uptime_s) for x in xids]
    assert [(c, b) for c, b, _ in got] == [(c, b) for c, b, _ in found]
    assert [t for *_, t in got if t is not None][:1] == [t for *_, t in found if t][:1]


def test_xid_94_is_fatal_and_application_xids_warn() -> None:
    xids, *_ = parse_xid(_read("xid_dmesg_T_h100_535.txt"), 0)
    gpus = tuple(GpuHealth(i, bus_id=f"00000000:00:{5 + i:02X}.0") for i in range(4))
    found = examine(HostHealth(gpus=gpus, xids=xids), 4)
    assert [(f.code, f.gpu, f.measured) for f in found] == [
        ("xid-fatal", 3, "Xid 94 since boot"),
        ("xid", 0, "Xid 43 x2 since boot"), ("xid", 2, "Xid 31 since boot")]
    assert {13, 31, 43, 45} & FATAL_XIDS == set() and {48, 79, 94, 95, 119} <= FATAL_XIDS


def test_xid_since_the_last_check_only_on_the_same_boot() -> None:
    gpu = GpuHealth(0, bus_id="00000000:3B:00.0")
    xids = (Xid(79, "3b:00", "GPU has fallen off the bus.", 100.0),
            Xid(13, "3b:00", "Graphics Exception", 500.0))
    h = HostHealth(gpus=(gpu,), xids=xids, boot_id="b1", uptime_s=600.0)
    assert codes(examine(h, 1)) == ["xid-fatal", "xid"]
    seen = Baseline(boot_id="b1", uptime_s=200.0)
    (f,) = examine(h, 1, baseline=seen)
    assert (f.code, f.measured) == ("xid", "Xid 13 since the last check")
    assert codes(examine(h, 1, baseline=replace(seen, boot_id="b0"))) == ["xid-fatal", "xid"]


# -- each check: tripped, and not --------------------------------------------------------------

HEALTHY = GpuHealth(0, bus_id="00000000:3B:00.0", pcie_gen=4, pcie_gen_max=4, pcie_width=16,
                    pcie_width_max=16, event_reasons=0x1, ecc_enabled=True, ecc_uncorrected=0,
                    retired_pending=False, remap_pending=False, remap_failed=False,
                    recovery_action="None", temperature_c=40, utilization_pct=0)


@pytest.mark.parametrize(("change", "code"), [
    ({"pcie_width": 8}, "pcie-width"),
    ({"pcie_gen": 3, "event_reasons": 0x0}, "pcie-gen"),
    ({"event_reasons": 0x40 | 0x1}, "clock-slowdown"),
    ({"event_reasons": 0x80}, "clock-slowdown"),
    ({"event_reasons": 0x8}, "clock-slowdown"),
    ({"event_reasons": 0x20}, "clock-slowdown"),
    ({"ecc_uncorrected": 2}, "ecc-uncorrected"),
    ({"retired_pending": True}, "retired-pages-pending"),
    ({"remap_pending": True}, "row-remap-pending"),
    ({"remap_failed": True}, "row-remap-failed"),
    ({"recovery_action": "Reset"}, "gpu-reset-required"),
    ({"recovery_action": "Reboot"}, "gpu-reset-required"),
    ({"recovery_action": None, "reset_required": True}, "gpu-reset-required"),
    ({"recovery_action": "Drain and Reset"}, "gpu-drain"),
    ({"recovery_action": "Drain P2P"}, "gpu-drain"),
    ({"recovery_action": None, "drain_recommended": True}, "gpu-drain"),
])
def test_each_gpu_check_trips_on_its_value(change: dict[str, object], code: str) -> None:
    assert examine(HostHealth(gpus=(HEALTHY,)), 1) == ()
    sick = replace(HEALTHY, **change)  # type: ignore[arg-type]
    (f,) = examine(HostHealth(gpus=(sick,)), 1)
    assert (f.code, f.gpu) == (code, 0) and f.check.fix in f.text()


def test_not_supported_is_never_a_finding() -> None:
    blank = GpuHealth(0)  # every field None: an old GPU or driver that reports none of them
    assert examine(HostHealth(gpus=(blank,)), 1) == ()
    assert examine(HostHealth(gpus=(replace(HEALTHY, pcie_gen=1),)), 1) == ()  # idle: not judged
    unknown_idle = replace(HEALTHY, pcie_gen=1, event_reasons=None)
    assert examine(HostHealth(gpus=(unknown_idle,)), 1) == ()


def test_only_the_gpus_the_ranks_use_count() -> None:
    sick = replace(HEALTHY, index=3, ecc_uncorrected=1)
    h = HostHealth(gpus=(HEALTHY, sick))
    assert examine(h, 1) == () and codes(examine(h, 4)) == ["ecc-uncorrected"]
    assert examine(h, 4, gpus=False) == ()  # a CPU job: the GPUs do not matter


def test_pcie_replays_rising_since_the_last_check_or_high_without_one() -> None:
    h = HostHealth(gpus=(HEALTHY,), replays={"3b:00": 40}, boot_id="b")
    assert examine(h, 1) == ()
    assert examine(h, 1, baseline=Baseline("b", 1.0, {"3b:00": 40})) == ()
    (f,) = examine(h, 1, baseline=Baseline("b", 1.0, {"3b:00": 12}))
    assert (f.code, f.measured) == ("pcie-replays", "40 replays, 28 since the last check")
    (f,) = examine(replace(h, replays={"3b:00": 5000}), 1)
    assert f.measured == "5000 replays since reset"


def test_ib_port_rate_link_downed_and_eth_speed() -> None:
    ports = (IbPort("mlx5_0", "1", "DOWN", "Disabled", None, "InfiniBand", 0),
             IbPort("mlx5_1", "1", "ACTIVE", "LinkUp", 100.0, "InfiniBand", 3))
    nets = (NetLink("ib0", None, "down", "mlx5_0"), NetLink("eth0", 10000, "up", None))
    h = HostHealth(ports=ports, nets=nets)
    fleet = Fleet(ib_rate=200.0, eth_speed=25000)
    assert [(f.code, f.measured) for f in examine(h, 0, iface="ib0", fleet=fleet)] == [
        ("ib-port-down", "mlx5_0/1 (ib0) is DOWN (Disabled)"),
        ("ib-rate-low", "mlx5_1/1 at 100 Gb/s"),
        ("ib-link-downed", "mlx5_1/1 link went down 3 times")]
    base = baseline_of(h)
    assert base.link_downed == {"mlx5_0/1": 0, "mlx5_1/1": 3}
    assert codes(examine(h, 0, iface="eth0", fleet=fleet, baseline=replace(
        base, boot_id="b"))) == ["eth-speed-low", "ib-rate-low", "ib-link-downed"]
    h2 = replace(h, boot_id="b")
    assert "ib-link-downed" not in codes(examine(h2, 0, iface="eth0", fleet=fleet,
                                                 baseline=replace(base, boot_id="b")))


def test_another_runs_ranks_but_not_our_own() -> None:
    h = HostHealth(runs=((101, "20261126-a"), (102, "20261126-a"), (200, "mine")))
    (f,) = examine(h, 0, run_id="mine")
    assert (f.code, f.measured) == ("other-job", "ranks of run 20261126-a (pid 101, 102)")
    assert examine(replace(h, runs=((200, "mine"),)), 0, run_id="mine") == ()


def test_bus_keys_of_nvidia_smi_and_xid_lines_meet() -> None:
    assert bus_key("00000000:3B:00.0") == bus_key("0000:3b:00") == bus_key("PCI:0000:3b:00"[4:])


# -- policy -----------------------------------------------------------------------------------

def test_on_bad_host_per_code() -> None:
    p = parse_on_bad_host(["exclude", "pcie-width=exclude", "xid=ignore"])
    assert p == BadHostPolicy("exclude", (("pcie-width", "exclude"), ("xid", "ignore")))
    assert p.action("ecc-uncorrected") == "exclude" and p.action("clock-slowdown") == "warn"
    assert parse_on_bad_host([]).action("xid-fatal") == "fail"
    for bad, said in [("sometimes", "is not fail, exclude or CODE=ACTION"),
                      ("pcie-widht=warn", "unknown reason code 'pcie-widht'"),
                      ("xid=maybe", "action 'maybe' is not one of fail, exclude, warn, ignore")]:
        with pytest.raises(UsageError, match=said) as err:
            parse_on_bad_host([bad])
        assert "pcie-width" in (err.value.hint or "")


def test_every_check_has_words_for_the_docs_table() -> None:
    assert len(CHECKS) == len(BY_CODE) >= 12
    for c in CHECKS:
        assert c.severity in ("fatal", "warn") and c.what and c.threshold and c.source and c.fix


def _probe_text(host: str, health_rows: str) -> str:
    return (f"@@ringtrain:probe 1@@\n@@ringtrain:begin host@@\n{host}\n@@ringtrain:end 0@@\n"
            "@@ringtrain:begin gpu@@\n"
            "0, NVIDIA H100 80GB HBM3, GPU-00000000-0000-0000-0000-000000000000, 81559, 0, 0, "
            "580.159.04\n@@ringtrain:end 0@@\n"
            "@@ringtrain:begin python@@\npython 3.11.2\ntensorflow 2.15.1\ntensorflow-cpu -\n"
            "tensorflow-gpu -\nhorovod 0.28.1\nmpi4py 3.1.5\ncudnn nvidia-cudnn-cu12\n"
            "horovod-nccl yes\n@@ringtrain:end 0@@\n"
            "@@ringtrain:begin mpi@@\nmpirun (Open MPI) 4.1.4\n@@ringtrain:end 0@@\n"
            "@@ringtrain:begin net@@\n2: eth0    inet 10.0.0.1/24 scope global eth0\n"
            "@@ringtrain:end 0@@\n@@ringtrain:begin health@@\n"
            "#fields index,pci.bus_id,pcie.link.width.current,pcie.link.width.max,"
            f"ecc.errors.uncorrected.volatile.total\n{health_rows}\n@@ringtrain:end 0@@\n"
            "@@ringtrain:done@@\n")


def test_verdict_takes_each_codes_action() -> None:
    inv = Inventory((Host("gpu01", 1), Host("gpu02", 1), Host("gpu03", 1)), source="t",
                    format="t")
    report = ProbeReport((
        parse_probe_output("gpu01", _probe_text("gpu01", "0, 00000000:3B:00.0, 16, 16, 0")),
        parse_probe_output("gpu02", _probe_text("gpu02", "0, 00000000:3B:00.0, 8, 16, 0")),
        parse_probe_output("gpu03", _probe_text("gpu03", "0, 00000000:3B:00.0, 16, 16, 4")),
    ))
    v = evaluate(inv, report, PreflightPolicy())
    assert [h.status for h in v.hosts] == [HostStatus.OK, HostStatus.WARN, HostStatus.FAILED]
    assert v.host("gpu02").warnings[0].startswith("[pcie-width] GPU 0 PCIe x8 (expected x16)")
    assert v.host("gpu03").problems[0].startswith("[ecc-uncorrected] GPU 0 4 uncorrected")
    v = evaluate(inv, report, PreflightPolicy(
        doctor_actions=(("pcie-width", "exclude"), ("ecc-uncorrected", "exclude"))))
    assert v.excluded == ("gpu02", "gpu03") and not v.refused
    assert v.host("gpu02").problems[-1].endswith("excluded (--on-bad-host pcie-width=exclude)")
    v = evaluate(inv, report, PreflightPolicy(doctor_actions=(("ecc-uncorrected", "ignore"),)))
    assert v.host("gpu03").status is HostStatus.OK
    assert [(j.finding.code, j.action) for j in v.host("gpu02").findings] == [
        ("pcie-width", "warn")]
    assert evaluate(inv, report, PreflightPolicy(doctor=False)).host("gpu03").usable


def test_a_foreign_compute_process_makes_a_gpu_busy_and_count_and_busy_are_findings() -> None:
    from ringtrain.probe.doctor_parse import ComputeApp

    inv = Inventory((Host("gpu01", 2), Host("gpu02", 2)), source="t", format="t")
    text = _probe_text("gpu01", "0, 00000000:3B:00.0, 16, 16, 0")
    one = parse_probe_output("gpu01", text)
    assert one.health is not None
    uuid = one.gpus[0].uuid
    busy = replace(one, health=replace(one.health, apps=(ComputeApp(4242, "python3", uuid, 300),
                                                         ComputeApp(77, "python3", uuid, 200)),
                                       runs=((77, "mine"),)))
    v = evaluate(inv, ProbeReport((busy, replace(one, host="gpu02"))),
                 PreflightPolicy(run_id="mine"))
    h1 = v.host("gpu01")
    # 300 MiB is under the memory threshold: the process alone makes it busy; our own (77) not
    assert h1.warnings[0] == ("GPU 0 busy (0 MiB used, 0% utilization; python3 pid 4242): "
                              "another job may be running")
    found = [(j.finding.code, j.finding.gpu, j.action, j.said) for j in h1.findings]
    assert found == [("gpu-count", None, "fail", True), ("gpu-busy", 0, "warn", True)]
    assert h1.problems == ("expected 2 GPUs, nvidia-smi saw 1; fix the host or pass "
                           "--on-bad-host exclude",)  # said once, not again as a finding


# -- baselines kept between runs ----------------------------------------------------------------

def test_baselines_round_trip_and_bad_entries_are_dropped(tmp_path: Path) -> None:
    from ringtrain.probe import baselines

    path = tmp_path / "state" / "ringtrain" / "doctor.json"
    assert baselines.load(path) == {}
    b = Baseline("b-1", 100.5, {"3b:00": 4}, {"mlx5_0/1": 2})
    baselines.save(path, {"gpu01": b})
    assert baselines.load(path) == {"gpu01": b}
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    baselines.save(path, {"gpu02": replace(b, boot_id="b-2")})
    assert set(baselines.load(path)) == {"gpu01", "gpu02"}
    path.write_text(json.dumps({"gpu01": {"boot_id": "b", "uptime_s": "soon"},
                                "gpu02": {"boot_id": "b", "uptime_s": 5, "replays": {"x": -1,
                                                                                   "y": 3}},
                                "bad host!": {"boot_id": "b", "uptime_s": 5}, "gpu03": []}))
    assert baselines.load(path) == {"gpu02": Baseline("b", 5.0, {"y": 3}, {})}
    path.write_text("[1, 2")
    assert baselines.load(path) == {}


def test_baselines_never_follow_a_link(tmp_path: Path) -> None:
    from ringtrain.probe import baselines

    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"gpu01": {"boot_id": "b", "uptime_s": 1}}))
    path = tmp_path / "doctor.json"
    path.symlink_to(target)
    assert baselines.load(path) == {}
    baselines.save(path, {"gpu02": Baseline("b", 2.0)})  # replaces the link, not its target
    assert not path.is_symlink() and json.loads(target.read_text()) == {
        "gpu01": {"boot_id": "b", "uptime_s": 1}}


def test_only_hosts_without_a_fatal_finding_are_remembered() -> None:
    from ringtrain.probe import baselines

    h = HostHealth(gpus=(HEALTHY,), boot_id="b", uptime_s=50.0, replays={"3b:00": 1})
    assert baselines.recordable({"gpu01": (True, h), "gpu02": (False, h),
                                 "gpu03": (True, None),
                                 "gpu04": (True, replace(h, boot_id=None))}) == {
        "gpu01": Baseline("b", 50.0, {"3b:00": 1}, {})}


def test_the_preflight_page_table_is_the_checks() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "PREFLIGHT.md").read_text()
    for c in CHECKS:
        default = "exclude or fail" if c.severity == "fatal" else "warn"
        row = f"| `{c.code}` | {default} | {c.what} | {c.threshold} | {c.source} |"
        assert row in page, row
