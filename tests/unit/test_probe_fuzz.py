"""Probe parsers are total: whatever a host prints, every parser returns a value (issue 16).

Remote output is decoded with ``errors="replace"`` (ringtrain.remote.base), so "any bytes" is
any str. Each parser of remote output is fuzzed with arbitrary text and with text shaped like the
tool's format (CSV rows of nasty fields, ``ip -o addr`` lines, the probe's framing); so is the
whole chain that ``ringtrain check`` and the launch pre-flight run (parse -> evaluate -> table
and JSON). The crashes these found are pinned as plain tests in test_probe_robust.py.
"""

from __future__ import annotations

import contextlib
import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrain.cli.verdict_view import print_verdict, verdict_to_dict
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import result_from_cmd
from ringtrain.probe.probe_parse import (
    SECTIONS,
    GpuQuery,
    GpuStatus,
    ProbeReport,
    ProbeResult,
    Versions,
    parse_ip_addr,
    parse_mpirun_version,
    parse_nvidia_smi,
    parse_probe_output,
    parse_python_versions,
    split_sections,
)
from ringtrain.probe.verdict import PreflightPolicy, evaluate
from ringtrain.remote import CmdResult
from tests.fakes import probe_stdout

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
_MAX = 2**53

# Any text, and text that came in as bytes (invalid UTF-8 becomes U+FFFD, as in remote.base).
_bytes_text = st.binary(max_size=400).map(lambda b: b.decode("utf-8", errors="replace"))
any_text = st.one_of(st.text(max_size=400), _bytes_text)
exit_codes = st.one_of(st.none(), st.integers(-1, 300), st.integers())

# Field values nvidia-smi prints, and ones no nvidia-smi should but a broken host might.
NASTY = [
    "0", "4", "81920", "100", "1.5", "-1", "inf", "-inf", "Infinity", "nan", "NaN", "1e999",
    "1e300", "9" * 400, "9" * 5000, "1_000", "0x10", "²", "١٢", "٣", " ", "", "[N/A]", "N/A",
    "[Not Supported]", "[Unknown Error]", "[GPU requires reset]", "[GPU is lost]",
    "[Insufficient Permissions]", "[/x]", "[bold]", "NVIDIA [/x]", "GPU-0f1e2d3c",
    "NVIDIA A100-SXM4-80GB",
    "535.129.03", "\x00", "\ufffd", "a\tb",
]
field = st.one_of(st.sampled_from(NASTY), st.text(max_size=12).filter(lambda s: "\n" not in s))
index_field = st.one_of(st.integers(0, 15).map(str), field)
csv_row = st.builds(lambda i, rest: ", ".join([i, *rest]), index_field,
                    st.lists(field, min_size=0, max_size=9))
ERROR_LINES = [
    "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
    "Unable to determine the device handle for GPU0000:02:00.0: GPU is lost. Reboot the system "
    "to recover this GPU",
    "GPU 00000000:3B:00.0: GPU is lost. Reboot the system to recover this GPU",
    "No devices were found",
    "Failed to initialize NVML: Driver/library version mismatch",
    "WARNING: infoROM is corrupted at gpu 0000:1B:00.0",
]
smi_line = st.one_of(csv_row, st.sampled_from(ERROR_LINES), st.text(max_size=60))
smi_text = st.one_of(any_text, st.lists(smi_line, max_size=12).map("\n".join))

ip_line = st.builds(
    lambda n, name, fam, addr, plen, rest: f"{n}: {name}    {fam} {addr}{plen} {rest}",
    st.sampled_from(["1", "2", "٣", "99999999999999999999"]),
    st.one_of(st.sampled_from(["lo", "eth0", "eth0@if7", "[/x]", "a" * 40, "a/b", "x:y", "."]),
              st.text(min_size=1, max_size=20)),
    st.sampled_from(["inet", "inet6", "link/ether"]),
    st.one_of(st.ip_addresses().map(str), st.sampled_from(["999.1.1.1", "::::", "1.2.3", ""]),
              st.text(alphabet="0123456789abcdef.:", max_size=40)),
    st.one_of(st.just(""), st.integers(0, 200).map(lambda p: f"/{p}"),
              st.sampled_from(["/٣٢", "/" + "9" * 5000, "/"])),
    st.sampled_from(["scope global eth0", "scope host lo", "peer 10.0.0.2/32 scope global",
                     "scope", "brd 10.0.0.255 scope link", ""]),
)
ip_text = st.one_of(any_text, st.lists(ip_line, max_size=8).map("\n".join))

py_text = st.one_of(any_text, st.lists(st.tuples(
    st.sampled_from(["python", "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "horovod",
                     "mpi4py", "x"]),
    st.one_of(st.sampled_from(["-", "3.11.2", "2.15.1", "[/x]", "[bold]", ""]),
              st.text(max_size=10)),
).map(" ".join), max_size=8).map("\n".join))

MARKERS = ["@@ringtrain:probe 1@@", "@@ringtrain:done@@", "@@ringtrain:end 0@@",
           "@@ringtrain:end ²@@", "@@ringtrain:end " + "1" * 5000 + "@@", "@@ringtrain:end @@",
           "@@ringtrain:begin @@", *(f"@@ringtrain:begin {s}@@" for s in SECTIONS)]
framed_text = st.lists(st.one_of(st.sampled_from(MARKERS), smi_line, ip_line),
                       max_size=30).map("\n".join)


def _check_gpu_query(q: GpuQuery) -> None:
    assert isinstance(q, GpuQuery) and isinstance(q.status, GpuStatus)
    if q.status in (GpuStatus.FAILED, GpuStatus.NO_GPUS, GpuStatus.NOT_INSTALLED):
        assert q.message  # a failed/unknown status always says why
    for g in q.gpus:
        assert 0 <= g.index < _MAX
        for value in (g.memory_total_mib, g.memory_used_mib, g.utilization_pct):
            assert value is None or (isinstance(value, int) and 0 <= value < _MAX)
    json.dumps([q.message, q.driver_version, list(q.lost)], allow_nan=False)


@FUZZ
@given(smi_text, exit_codes)
def test_nvidia_smi_is_total(text: str, rc: int | None) -> None:
    _check_gpu_query(parse_nvidia_smi(text, rc))


@FUZZ
@given(st.lists(csv_row, min_size=1, max_size=8).map("\n".join))
def test_nvidia_smi_rows_are_total(text: str) -> None:
    q = parse_nvidia_smi(text, 0)
    _check_gpu_query(q)
    assert q.status is not GpuStatus.NOT_INSTALLED and bool(q.gpus) is (q.status is GpuStatus.OK)


@FUZZ
@given(py_text, exit_codes, st.text(max_size=20))
def test_python_versions_are_total(text: str, rc: int | None, python: str) -> None:
    v = parse_python_versions(text, rc, python)
    assert isinstance(v, Versions)
    assert all(value is None or isinstance(value, str) for _, value in v.items())


@FUZZ
@given(any_text, exit_codes)
def test_mpirun_version_is_total(text: str, rc: int | None) -> None:
    out = parse_mpirun_version(text, rc)
    assert out is None or isinstance(out, str)


@FUZZ
@given(ip_text)
def test_ip_addr_is_total(text: str) -> None:
    for iface in parse_ip_addr(text):
        assert iface.ip.version in (4, 6) and iface.cidr  # every interface kept is usable
        assert 0 < len(iface.name.encode()) <= 15 and "/" not in iface.name


@FUZZ
@given(st.one_of(any_text, framed_text))
def test_sections_and_whole_output_are_total(text: str) -> None:
    for s in split_sections(text).values():
        assert s.exit_code is None or 0 <= s.exit_code < _MAX
    r = parse_probe_output("h", text)
    assert isinstance(r, ProbeResult) and r.reachable
    _check_gpu_query(r.gpu)


@FUZZ
@given(any_text, any_text, exit_codes, st.one_of(st.none(), st.text(max_size=40)))
def test_result_from_cmd_is_total(stdout: str, stderr: str, rc: int | None,
                                  error: str | None) -> None:
    r = result_from_cmd("h", CmdResult("h", rc, stdout, stderr, error, 0.5))
    assert isinstance(r, ProbeResult) and r.reachable is (error is None)


rc = st.one_of(st.just(0), st.sampled_from([1, 6, 9, 15, 18, 127]), st.integers(0, 255))
host_text = st.builds(
    lambda name, gpu, py, mpi, net: probe_stdout(name, gpu=gpu, python=py, mpi=mpi, net=net),
    st.one_of(st.sampled_from(["gpu01", "[/x]", ""]), st.text(max_size=20)),
    st.tuples(smi_text, rc), st.one_of(st.none(), st.tuples(py_text, rc)),
    st.tuples(any_text, rc), ip_text,
)


def _render(inv: Inventory, report: ProbeReport, policy: PreflightPolicy) -> None:
    verdict = evaluate(inv, report, policy)
    json.dumps(verdict_to_dict(inv, report, verdict), allow_nan=False)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        print_verdict(inv, report, verdict, policy, stderr=True)
    assert "ringtrain check" in err.getvalue()
    verdict.error()  # the refusal message is built from the same text


@settings(FUZZ, max_examples=300)
@given(st.lists(host_text, min_size=1, max_size=3), st.integers(1, 8), st.booleans(),
       st.sampled_from(["fail", "exclude"]))
def test_check_and_preflight_survive_any_host_output(texts: list[str], slots: int, gpus: bool,
                                                      on_bad: str) -> None:
    """What `ringtrain check` and the launch pre-flight do with the probe text: no traceback."""
    inv = Inventory(tuple(Host(f"gpu0{i}", slots) for i in range(len(texts))))
    report = ProbeReport(tuple(parse_probe_output(f"gpu0{i}", t) for i, t in enumerate(texts)))
    policy = PreflightPolicy(on_bad_host="exclude" if on_bad == "exclude" else "fail",
                             require_gpus=gpus, np=slots)
    _render(inv, report, policy)
