"""The probe parsers against golden probe outputs (tests/unit/golden/probe/*.out -> *.json)."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest

from ringtrain.probe.probe_parse import GpuStatus, ProbeResult, parse_probe_output
from tests.golden import GOLDEN_DIR, assert_golden

CASES = sorted(p.stem for p in (GOLDEN_DIR / "probe").glob("*.out"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):  # the doctor's maps: bus -> count, (GPU, NIC) -> relation
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=str)}
    return value


def parse_case(name: str) -> ProbeResult:
    text = (GOLDEN_DIR / "probe" / f"{name}.out").read_text()
    return parse_probe_output(name, text, python="/opt/venv/bin/python")


def test_all_cases_present() -> None:
    assert {"a100x8_idle", "h100x8_busy", "driver_failure", "no_nvidia_smi", "na_not_supported",
            "no_gpus", "local_vm_real", "gpu_lost_exit0", "gpu_is_lost_exit0",
            "gpu_requires_reset"} <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    result = parse_case(name)
    text = json.dumps(_jsonable(result), indent=1, sort_keys=True) + "\n"
    assert_golden(f"probe/{name}.json", text)


def test_a100_idle() -> None:
    r = parse_case("a100x8_idle")
    assert r.reachable and r.error is None and r.hostname == "gpu01"
    assert r.gpu.status is GpuStatus.OK
    assert [g.index for g in r.gpus] == list(range(8))
    assert {g.name for g in r.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert all(g.memory_total_mib == 81920 and g.memory_used_mib == 4 for g in r.gpus)
    assert r.gpus[0].uuid.startswith("GPU-") and len(r.gpus[0].uuid) == 40
    assert r.driver_version == "535.129.03"
    assert r.versions.items() == (("python", "3.11.2"), ("tensorflow", "2.15.1"),
                                  ("horovod", "0.28.1"), ("mpi4py", "4.1.2"),
                                  ("mpi", "Open MPI 4.1.4"))
    assert [(i.name, i.cidr) for i in r.interfaces if i.version == 4] == [
        ("lo", "127.0.0.1/8"), ("eno1", "10.1.0.11/24"), ("ib0", "172.20.0.11/16"),
        ("docker0", "172.17.0.1/16")]


def test_h100_busy_gpu_is_parsed_not_judged() -> None:
    r = parse_case("h100x8_busy")
    g3 = r.gpus[3]
    assert (g3.memory_total_mib, g3.memory_used_mib, g3.utilization_pct) == (81559, 78112, 100)
    assert all(g.ok for g in r.gpus)


def test_driver_failure() -> None:
    r = parse_case("driver_failure")
    assert r.reachable and r.gpu.status is GpuStatus.FAILED and r.gpus == ()
    assert r.gpu.message is not None
    assert r.gpu.message.startswith("nvidia-smi failed (exit 9: NVIDIA driver is not loaded): "
                                    "NVIDIA-SMI has failed because it couldn't communicate")


def test_no_nvidia_smi_and_mpich_and_tensorflow_cpu() -> None:
    r = parse_case("no_nvidia_smi")
    assert r.gpu.status is GpuStatus.NOT_INSTALLED
    r = parse_case("mpich_no_mpirun_py_cpu")
    assert r.versions.mpi == "MPICH 4.0.2"
    assert (r.versions.tensorflow, r.versions.tensorflow_dist) == ("2.15.1", "tensorflow-cpu")


def test_na_and_not_supported_are_unknown_not_errors() -> None:
    r = parse_case("na_not_supported")
    assert r.gpu.status is GpuStatus.OK and all(g.ok for g in r.gpus)
    assert r.gpus[0].utilization_pct is None and r.gpus[0].memory_used_mib == 0
    assert (r.gpus[2].name, r.gpus[2].memory_used_mib, r.gpus[2].utilization_pct) == (
        "Tesla T4", None, None)


def test_no_gpus_and_nvml_mismatch() -> None:
    assert parse_case("no_gpus").gpu.status is GpuStatus.NO_GPUS
    r = parse_case("nvml_mismatch")
    assert r.gpu.status is GpuStatus.FAILED and r.gpu.message is not None
    assert "Driver/library version mismatch" in r.gpu.message and "exit 18" in r.gpu.message


def test_lost_gpu_keeps_rows_marks_the_sick_one() -> None:
    r = parse_case("gpu_lost")
    assert r.gpu.status is GpuStatus.FAILED
    assert len(r.gpus) == 4 and len(r.gpu.healthy) == 3
    assert r.gpus[3].problem == "memory.used [Unknown Error]; utilization.gpu [Unknown Error]"
    assert r.gpu.message is not None and "Unable to determine the device handle" in r.gpu.message
    assert r.gpu.lost == ("Unable to determine the device handle for GPU 0000:3B:00.0: "
                          "Unknown Error",)


def test_gpu_lost_while_nvidia_smi_exits_0_is_a_missing_gpu_with_its_words() -> None:
    r = parse_case("gpu_lost_exit0")
    assert r.error is None and r.gpu.status is GpuStatus.OK
    assert [g.index for g in r.gpus] == [0, 1, 3, 4, 5, 6, 7] and all(g.ok for g in r.gpus)
    assert r.gpu.lost == ("Unable to determine the device handle for GPU0000:3A:00.0: "
                          "Unknown Error",)
    assert r.gpu.message == r.gpu.lost[0]
    r = parse_case("gpu_is_lost_exit0")
    assert len(r.gpu.healthy) == 3 and len(r.gpu.lost) == 1
    assert r.gpu.lost[0].endswith("GPU is lost. Reboot the system to recover this GPU")


def test_requires_reset_and_unknown_error_fields_mark_the_gpu_unhealthy() -> None:
    r = parse_case("gpu_requires_reset")
    assert r.gpu.status is GpuStatus.OK and r.gpu.lost == () and len(r.gpu.healthy) == 6
    assert r.gpus[5].problem == ("memory.used [GPU requires reset]; "
                                 "utilization.gpu [GPU requires reset]")
    assert r.gpus[6].problem == "memory.total [Unknown Error]; memory.used [Unknown Error]"
    assert r.gpus[6].utilization_pct == 0


def test_python_missing_and_login_chatter_and_truncation() -> None:
    r = parse_case("python_missing")
    assert r.versions.error == ("python not found at /opt/venv/bin/python on this host: "
                                "pass --python")
    r = parse_case("chatty_login")
    assert r.error is None and r.hostname == "gpu09" and r.versions.horovod == "0.27.0"
    r = parse_case("truncated")
    assert r.error is not None
    assert r.error.startswith("probe output incomplete (cut off before the end of: mpi, net)")
    assert r.versions.mpi is None and r.gpu.status is GpuStatus.OK


def test_real_capture_from_this_vm() -> None:
    r = parse_case("local_vm_real")
    assert r.gpu.status is GpuStatus.NOT_INSTALLED
    assert r.versions.mpi == "Open MPI 4.1.4" and r.versions.horovod == "0.28.1"
    assert any(i.name == "eth0" and i.version == 4 for i in r.interfaces)
