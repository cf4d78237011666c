"""Parsers of the probe sections, one tool's text at a time (real formats; hypothesis for rows)."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from ringtrain.probe.probe_parse import (
    GpuStatus,
    parse_ip_addr,
    parse_mpirun_version,
    parse_nvidia_smi,
    parse_python_versions,
    split_sections,
)

A100_ROW = ("0, NVIDIA A100-SXM4-80GB, GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b, 81920, 4, 0, "
            "535.129.03")


def test_one_row() -> None:
    q = parse_nvidia_smi(A100_ROW, 0)
    assert q.status is GpuStatus.OK and q.driver_version == "535.129.03"
    (g,) = q.gpus
    assert (g.index, g.name, g.memory_total_mib, g.memory_used_mib, g.utilization_pct) == (
        0, "NVIDIA A100-SXM4-80GB", 81920, 4, 0)
    assert g.uuid == "GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b" and g.ok


def test_unknown_error_field_marks_gpu_unhealthy() -> None:
    q = parse_nvidia_smi("1, Tesla V100-SXM2-32GB, GPU-x, 32510, [Unknown Error], 0, 470.57.02", 0)
    assert q.status is GpuStatus.OK and q.healthy == ()
    assert q.gpus[0].problem == "memory.used [Unknown Error]"


def test_unreadable_number_is_a_problem_not_a_crash() -> None:
    q = parse_nvidia_smi("0, X, GPU-x, lots, 0, 0, 1.0", 0)
    assert q.gpus[0].problem == "memory.total unreadable ('lots')"


def test_exit_codes() -> None:
    assert parse_nvidia_smi("sh: 1: nvidia-smi: not found", 127).status is GpuStatus.NOT_INSTALLED
    q = parse_nvidia_smi("", 124)
    assert q.status is GpuStatus.FAILED and q.message == (
        "nvidia-smi failed (exit 124: timed out (a hung driver?))")
    q = parse_nvidia_smi("Failed to initialize NVML: No supported GPUs were found\n"
                         "Unable to determine the number of GPUs", 255)
    assert q.status is GpuStatus.FAILED and q.message is not None
    assert q.message.endswith(
        "No supported GPUs were found; Unable to determine the number of GPUs")
    assert parse_nvidia_smi("", 0).status is GpuStatus.NO_GPUS
    assert parse_nvidia_smi(A100_ROW, None).status is GpuStatus.OK  # cut off after a full row


_name = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd"), whitelist_characters=" -"),
                min_size=1, max_size=30).map(str.strip).filter(bool)
_field = st.one_of(st.integers(0, 200_000).map(str), st.sampled_from(["[N/A]", "[Not Supported]"]))


@given(st.lists(st.tuples(_name, _field, _field, _field), min_size=1, max_size=16))
def test_rows_round_trip(rows: list[tuple[str, str, str, str]]) -> None:
    text = "\n".join(f"{i}, {n}, GPU-{i:04d}, {t}, {u}, {p}, 550.54.15"
                     for i, (n, t, u, p) in enumerate(rows))
    q = parse_nvidia_smi(text, 0)
    assert q.status is GpuStatus.OK and len(q.gpus) == len(rows)
    for g, (n, t, u, p) in zip(q.gpus, rows, strict=True):
        assert g.name == n and g.ok
        assert g.memory_total_mib == (int(t) if t.isdigit() else None)
        assert g.memory_used_mib == (int(u) if u.isdigit() else None)
        assert g.utilization_pct == (int(p) if p.isdigit() else None)


def test_name_with_comma_survives() -> None:
    q = parse_nvidia_smi("0, Weird, Inc. GPU, GPU-1, 100, 1, 2, 1.0", 0)
    assert q.gpus[0].name == "Weird, Inc. GPU" and q.gpus[0].uuid == "GPU-1"


def test_python_versions() -> None:
    v = parse_python_versions("python 3.10.12\ntensorflow -\ntensorflow-cpu -\n"
                              "tensorflow-gpu 2.11.0\nhorovod -\nmpi4py -", 0)
    assert (v.python, v.tensorflow, v.tensorflow_dist, v.horovod, v.mpi4py) == (
        "3.10.12", "2.11.0", "tensorflow-gpu", None, None)
    v = parse_python_versions("Traceback (most recent call last):\nSyntaxError: bad", 1, "py3")
    assert v.error == "py3 failed (exit 1): SyntaxError: bad"


def test_mpirun_versions() -> None:
    assert parse_mpirun_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to "
                                "http://www.open-mpi.org/community/help/", 0) == "Open MPI 4.1.4"
    assert parse_mpirun_version("Intel(R) MPI Library for Linux* OS, Version 2021.6 Build "
                                "20220227 (id: 28877f3f32)\nCopyright 2003-2022, Intel "
                                "Corporation.", 0) == "Intel MPI 2021.6"
    assert parse_mpirun_version("mpirun: command not found", 127) is None
    assert parse_mpirun_version("something else", 0) == "unknown (something else)"


def test_ip_addr_forms() -> None:
    text = "\n".join([
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
        "3: eth0@if7    inet 10.9.0.2/24 brd 10.9.0.255 scope global eth0\\       valid_lft "
        "forever preferred_lft forever",
        "4: eth1    inet 192.168.5.10/24 brd 192.168.5.255 scope global secondary eth1:1\\  "
        "     valid_lft forever preferred_lft forever",
        "5: tun0    inet 10.8.0.1 peer 10.8.0.2/32 scope global tun0\\       valid_lft forever "
        "preferred_lft forever",
        "6: ib0    inet6 fe80::1/64 scope link \\       valid_lft forever preferred_lft forever",
        "garbage line",
    ])
    got = [(i.name, i.cidr, i.scope) for i in parse_ip_addr(text)]
    assert got == [("lo", "127.0.0.1/8", "host"), ("eth0", "10.9.0.2/24", "global"),
                   ("eth1", "192.168.5.10/24", "global"), ("tun0", "10.8.0.1/32", "global"),
                   ("ib0", "fe80::1/64", "link")]


@given(st.ip_addresses(v=4), st.integers(0, 32),
       st.from_regex(r"[a-z][a-z0-9]{0,9}", fullmatch=True))
def test_ip_line_round_trip(addr: ipaddress.IPv4Address, plen: int, name: str) -> None:
    line = f"2: {name}    inet {addr}/{plen} scope global {name}\\       valid_lft forever"
    (iface,) = parse_ip_addr(line)
    assert (iface.name, iface.address, iface.prefixlen) == (name, str(addr), plen)


def test_sections_ignore_text_outside_markers() -> None:
    text = ("motd\n@@ringtrain:probe 1@@\n@@ringtrain:begin gpu@@\na\n\nb\n@@ringtrain:end 9@@\n"
            "stray\n@@ringtrain:begin net@@\nx\n")
    s = split_sections(text)
    assert (s["gpu"].body, s["gpu"].exit_code) == ("a\n\nb", 9)
    assert (s["net"].body, s["net"].exit_code) == ("x", None)
