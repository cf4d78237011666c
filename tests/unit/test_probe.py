"""probe() over the SSH seam (FakeRemote): one round trip, every host in the report."""

from __future__ import annotations

import pytest

from ringtrain.errors import UsageError
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.doctor_script import JOBS_PY
from ringtrain.probe.hostprobe import PROBE_SCRIPT, VERSIONS_PY, probe, probe_argv
from ringtrain.probe.probe_parse import GpuStatus
from tests.fakes import FakeRemote, gpu_rows, probe_stdout

PY = "/opt/venv/bin/python"
ARGV = probe_argv(PY)


def inventory(*names: str, slots: int = 4) -> Inventory:
    return Inventory(tuple(Host(n, slots) for n in names))


def test_argv_passes_python_and_snippet_as_arguments_not_text() -> None:
    assert ARGV == ("sh", "-c", PROBE_SCRIPT, "ringtrain-probe", PY, VERSIONS_PY, JOBS_PY)
    assert PY not in PROBE_SCRIPT
    assert "--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,driver_version" \
        in PROBE_SCRIPT and "--format=csv,noheader,nounits" in PROBE_SCRIPT
    assert "import tensorflow" not in VERSIONS_PY  # metadata only: importing TF takes seconds


@pytest.mark.parametrize("bad", ["py; rm -rf /", "-c", "$(id)", "a b", ""])
def test_python_path_is_validated(bad: str) -> None:
    with pytest.raises(UsageError):
        probe_argv(bad)


def test_one_call_every_host_in_order() -> None:
    fake = (FakeRemote()
            .on("gpu01", ARGV, stdout=probe_stdout("gpu01", gpu=(gpu_rows(4), 0)))
            .on("gpu02", ARGV, error="connection refused by 10.0.0.2:22 (is sshd running?)")
            .on("gpu03", ARGV, stdout="", stderr="sh: 1: Syntax error", exit_code=2))
    report = probe(inventory("gpu03", "gpu01", "gpu02"), fake, python=PY, timeout=7)
    assert len(fake.calls) == 1 and fake.calls[0] == (("gpu03", "gpu01", "gpu02"), ARGV, 7)
    assert [r.host for r in report.results] == ["gpu03", "gpu01", "gpu02"]
    ok = report.result("gpu01")
    assert ok.reachable and ok.gpu.status is GpuStatus.OK and len(ok.gpus) == 4
    down = report.result("gpu02")
    assert not down.reachable and down.error is not None and "connection refused" in down.error
    assert report.unreachable == (down,)
    broken = report.result("gpu03")
    assert broken.reachable and broken.error == "probe script failed (exit 2): sh: 1: Syntax error"


def test_default_python_is_the_launchers_own() -> None:
    import sys

    argv = probe_argv(sys.executable)
    fake = FakeRemote().on("localhost", argv, stdout=probe_stdout("vm"))
    report = probe(inventory("localhost"), fake)
    assert report.result("localhost").hostname == "vm"
