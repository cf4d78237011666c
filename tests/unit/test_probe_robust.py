"""Probe output that crashed or fooled the parsers and `ringtrain check` (issue 16, item 3).

Each input below was found by the fuzzers in test_probe_fuzz.py (or is the known bug they were
written for); each test fails on the code before the fix, with a traceback or a wrong value.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.cli.context import CliContext
from ringtrain.cli.verdict_view import print_verdict
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import probe_argv
from ringtrain.probe.probe_parse import (
    GpuStatus,
    ProbeReport,
    parse_ip_addr,
    parse_nvidia_smi,
    parse_probe_output,
    split_sections,
)
from ringtrain.probe.verdict import HostStatus, PreflightPolicy, evaluate
from tests.fakes import FakeRemote, gpu_rows, ip_lines, probe_stdout

ARGV = probe_argv(sys.executable)
UUID = "GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


def row(total: str = "81920", used: str = "4", util: str = "0", index: str = "0") -> str:
    return f"{index}, NVIDIA A100-SXM4-80GB, {UUID}, {total}, {used}, {util}, 535.129.03"


# --- numbers: int(float("inf")) raised OverflowError out of parse_nvidia_smi --------------------

@pytest.mark.parametrize("value", ["inf", "INF", "-inf", "Infinity", "1e999", "1E310", "9" * 400,
                                   "1e300", "-1"])
@pytest.mark.parametrize("column", ["total", "used", "util"])
def test_non_finite_negative_or_absurd_number_marks_the_gpu_not_a_crash(
        value: str, column: str) -> None:
    q = parse_nvidia_smi(row(**{column: value}), 0)
    assert q.status is GpuStatus.OK and q.healthy == ()
    label = {"total": "memory.total", "used": "memory.used", "util": "utilization.gpu"}[column]
    shown = value if len(value) <= 40 else value[:37] + "..."
    assert q.gpus[0].problem == f"{label} unreadable ({shown!r})"


def test_nan_stays_unreadable() -> None:  # it already was; pinned beside inf
    assert parse_nvidia_smi(row(used="nan"), 0).gpus[0].problem == "memory.used unreadable ('nan')"


# --- indexes and exit codes: str.isdigit() is True for '²', int('²') raises --------------------

@pytest.mark.parametrize("index", ["²", "¹²", "9" * 5000, "9" * 400])
def test_index_that_is_not_a_plain_number_is_not_a_gpu_row(index: str) -> None:
    q = parse_nvidia_smi(row(index=index), 0)
    assert q.gpus == () and q.status is GpuStatus.NO_GPUS and q.message is not None
    assert len(q.message) <= 300  # a 5000-character line is clipped, not pasted


@pytest.mark.parametrize("code", ["²", "1" * 5000])
def test_section_exit_code_that_is_not_a_plain_number_is_unknown(code: str) -> None:
    s = split_sections(f"@@ringtrain:begin gpu@@\n{row()}\n@@ringtrain:end {code}@@")
    assert s["gpu"].exit_code is None
    r = parse_probe_output("h", probe_stdout("h").replace("@@ringtrain:end 0@@",
                                                        f"@@ringtrain:end {code}@@"))
    assert r.reachable and r.error is not None and r.error.startswith("probe output incomplete")


# --- ip -o addr: names Linux never gives an interface ----------------------------------------

def test_interface_names_linux_would_refuse_are_dropped() -> None:
    lines = ["0: / inet 10.0.0.1/24 scope global", "2: " + "a" * 16 + " inet 10.0.0.2/24",
             "3: eth0 inet 10.0.0.3/٣٢ scope global", "4: eth1 inet 10.0.0.4/24 scope global"]
    assert [i.name for i in parse_ip_addr("\n".join(lines))] == ["eth1"]


# --- `ringtrain check`: a value printed by a host was read as rich markup ---------------------

class Check:
    def __init__(self, remote: FakeRemote) -> None:
        self.remote = remote

    def __call__(self, *args: str) -> Any:
        remote = self.remote
        return CliRunner(env={"COLUMNS": "400"}).invoke(  # wide: table cells are not folded
            cli, ["check", *args], obj=CliContext(remote_factory=lambda _options: remote))


def one_host(**kw: Any) -> Check:
    kw.setdefault("gpu", (gpu_rows(4), 0))
    kw.setdefault("net", ip_lines(("eth0", "10.0.0.1/24")))
    return Check(FakeRemote().on("gpu01", ARGV, stdout=probe_stdout("gpu01", **kw)))


@pytest.mark.parametrize(("kw", "shown"), [
    ({"mpi": ("[/0]", 0)}, "unknown ([/0])"),
    ({"mpi": ("[/]", 0)}, "unknown ([/])"),
    ({"py_version": "[/x]"}, "py [/x]"),
    ({"gpu": (gpu_rows(4, model="Weird [/x] GPU"), 0)}, "Weird [/x] GPU"),
    ({"mpi": ("[gpu01:12345] *** An error occurred in MPI_Init", 0)}, "[gpu01:12345]"),
])
def test_host_text_is_shown_as_text_not_markup(kw: dict[str, Any], shown: str) -> None:
    result = one_host(**kw)("-H", "gpu01:4", "--allow-mixed-versions")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert shown in result.stdout


def test_check_with_inf_in_a_row_refuses_with_the_reason_no_traceback() -> None:
    rows = gpu_rows(4).replace(", 81920, 4, 0,", ", inf, 4, 0,", 1)
    result = one_host(gpu=(rows, 0))("-H", "gpu01:4")
    assert result.exit_code == 4 and isinstance(result.exception, SystemExit)
    assert "expected 4 GPUs, nvidia-smi saw 3 healthy; GPU 0: memory.total unreadable ('inf')" \
        in result.stderr


# --- partial GPU failure with exit 0: the host was "ok" with no warning -----------------------

LOST = "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"


def test_check_shows_a_lost_gpu_as_a_warning_in_nvidia_smis_words() -> None:
    check = one_host(gpu=(LOST + "\n" + gpu_rows(7), 0))
    result = check("-H", "gpu01:4")
    assert result.exit_code == 0, result.stderr
    assert "│ warn " in result.stdout and LOST in result.stdout
    data = json.loads(check("-H", "gpu01:4", "--json").stdout)
    (h,) = data["hosts"]
    assert h["status"] == "warn" and h["warnings"] == [
        f"nvidia-smi could not read 1 GPU (7 healthy GPUs still cover the 4 slots); "
        f"nvidia-smi: {LOST}"]
    result = check("-H", "gpu01:8")
    assert result.exit_code == 4
    assert f"gpu01: expected 8 GPUs, nvidia-smi saw 7 healthy; nvidia-smi: {LOST}" in result.stderr


def test_launch_preflight_table_shows_the_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch shows the same table (print_verdict on stderr) before it starts the ranks."""
    text = probe_stdout("gpu01", gpu=(LOST + "\n" + gpu_rows(7), 0))
    inv = Inventory((Host("gpu01", 4),))
    report = ProbeReport((parse_probe_output("gpu01", text),))
    policy = PreflightPolicy()
    verdict = evaluate(inv, report, policy)
    assert verdict.host("gpu01").status is HostStatus.WARN
    monkeypatch.setenv("COLUMNS", "400")
    with contextlib.redirect_stderr(io.StringIO()) as err:
        print_verdict(inv, report, verdict, policy, stderr=True)
    assert f"nvidia-smi could not read 1 GPU (7 healthy GPUs still cover the 4 slots); " \
        f"nvidia-smi: {LOST}" in err.getvalue()


def test_a_flood_of_lines_is_clipped_in_the_message() -> None:
    flood = "\n".join(f"line {i} " + "x" * 1000 for i in range(1000))
    q = parse_nvidia_smi(flood + "\n" + row(), 0)
    assert q.status is GpuStatus.OK and len(q.gpus) == 1 and q.message is not None
    assert q.message.endswith("; (990 more lines)") and len(q.message) < 10 * 300 + 100
