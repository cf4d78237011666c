"""Pre-flight policies on probe reports built from probe text (the same parsers as real runs)."""

from __future__ import annotations

import pytest

from ringtrain.errors import ProbeError
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.probe_parse import GpuStatus, ProbeReport, ProbeResult, parse_probe_output
from ringtrain.probe.verdict import HostStatus, PreflightPolicy, evaluate
from tests.fakes import gpu_rows, ip_lines, probe_stdout
from tests.golden import GOLDEN_DIR

FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.", 9)


def host_text(name: str, n_gpus: int = 4, **kw: object) -> str:
    i = int(name[-2:])
    defaults: dict[str, object] = {"gpu": (gpu_rows(n_gpus), 0),
                                   "net": ip_lines(("eth0", f"10.0.0.{i}/24"))}
    defaults.update(kw)
    return probe_stdout(name, **defaults)  # type: ignore[arg-type]


def setup(texts: dict[str, str | ProbeResult], slots: int = 4) -> tuple[Inventory, ProbeReport]:
    inv = Inventory(tuple(Host(h, slots) for h in texts))
    results = tuple(t if isinstance(t, ProbeResult) else parse_probe_output(h, t)
                    for h, t in texts.items())
    return inv, ProbeReport(results)


def four(**overrides: str | ProbeResult) -> dict[str, str | ProbeResult]:
    texts: dict[str, str | ProbeResult] = {f"gpu0{i}": host_text(f"gpu0{i}") for i in range(1, 5)}
    texts.update(overrides)
    return texts


def test_all_good() -> None:
    v = evaluate(*setup(four()))
    assert not v.refused and v.error() is None
    assert [h.status for h in v.hosts] == [HostStatus.OK] * 4
    assert v.usable_slots == (("gpu01", 4), ("gpu02", 4), ("gpu03", 4), ("gpu04", 4))
    assert v.network is not None and v.network.include == ("10.0.0.0/24",)
    assert v.warnings == ()


def test_fewer_gpus_than_slots_refuses_with_a_fix() -> None:
    v = evaluate(*setup(four(gpu03=host_text("gpu03", n_gpus=2))))
    h = v.host("gpu03")
    assert h.status is HostStatus.FAILED and h.slots_usable == 0
    assert h.problems == ("expected 4 GPUs, nvidia-smi saw 2; fix the host or pass "
                          "--on-bad-host exclude",)
    assert v.refused and [x.status for x in v.hosts].count(HostStatus.OK) == 3
    err = v.error()
    assert isinstance(err, ProbeError) and err.exit_code == 4
    assert "1 of 4 hosts have problems" in err.message
    assert ("gpu03: expected 4 GPUs, nvidia-smi saw 2; fix the host or pass --on-bad-host "
            "exclude") in err.message
    with pytest.raises(ProbeError):
        v.raise_if_refused()


def test_exclude_policy_drops_the_host() -> None:
    inv, report = setup(four(gpu03=host_text("gpu03", n_gpus=2)))
    v = evaluate(inv, report, PreflightPolicy(on_bad_host="exclude"))
    assert not v.refused and v.excluded == ("gpu03",)
    assert v.host("gpu03").problems[-1].endswith("excluded (--on-bad-host exclude)")
    kept = v.apply(inv)
    assert kept.names == ("gpu01", "gpu02", "gpu04") and kept.total_slots == 12


def test_min_hosts_and_np_after_exclusion() -> None:
    inv, report = setup({"gpu01": host_text("gpu01"), "gpu02": host_text("gpu02", n_gpus=1)})
    v = evaluate(inv, report, PreflightPolicy(on_bad_host="exclude", min_hosts=2, np=8))
    assert v.refused
    assert v.problems == ("only 1 usable hosts after excluding gpu02, --min-hosts 2",
                          "-np 8 needs 8 slots, only 4 are usable after excluding gpu02")
    err = v.error()
    assert err is not None and err.hint == "add hosts or slots, or lower -np / --min-hosts"


def test_unreachable_and_driver_failure_each_get_their_reason() -> None:
    down = ProbeResult("gpu02", False, "connection refused by 10.0.0.2:22 (is sshd running?)")
    v = evaluate(*setup(four(gpu02=down, gpu04=host_text("gpu04", gpu=FAILED))))
    assert v.host("gpu02").problems == (
        "unreachable: connection refused by 10.0.0.2:22 (is sshd running?); fix the host or "
        "pass --on-bad-host exclude",)
    (p,) = v.host("gpu04").problems
    assert p.startswith("nvidia-smi failed (exit 9: NVIDIA driver is not loaded): NVIDIA-SMI has")
    assert "run nvidia-smi on gpu04 and fix the driver" in p
    assert {h.host for h in v.hosts if h.status is HostStatus.FAILED} == {"gpu02", "gpu04"}


def test_busy_gpu_warns_or_excludes_and_only_counts_used_gpus() -> None:
    busy = host_text("gpu02", n_gpus=8, gpu=(gpu_rows(8, busy={1: (30000, 97)}), 0))
    idle_beyond_slots = host_text("gpu03", gpu=(gpu_rows(8, busy={6: (30000, 97)}), 0))
    v = evaluate(*setup(four(gpu02=busy, gpu03=idle_beyond_slots)))
    assert v.host("gpu02").status is HostStatus.WARN and not v.refused
    assert v.host("gpu02").warnings == (
        "GPU 1 busy (30000 MiB used, 97% utilization): another job may be running",)
    assert v.host("gpu03").status is HostStatus.OK  # GPU 6 is beyond the 4 slots asked
    inv, report = setup(four(gpu02=busy))
    v = evaluate(inv, report, PreflightPolicy(on_busy="exclude"))
    assert v.excluded == ("gpu02",) and not v.refused
    assert v.host("gpu02").problems[0].endswith("excluded (--on-busy exclude)")


def test_mixed_models_and_drivers_warn() -> None:
    v100 = host_text("gpu04", gpu=(gpu_rows(4, model="Tesla V100-SXM2-32GB", total=32510,
                                            driver="470.57.02"), 0))
    v = evaluate(*setup(four(gpu04=v100)))
    assert not v.refused
    assert v.warnings == (
        "mixed GPU models: NVIDIA A100-SXM4-80GB on gpu01, gpu02, gpu03; Tesla V100-SXM2-32GB "
        "on gpu04 (the ring runs at the pace of the slowest GPU)",
        "NVIDIA driver versions differ: 535.129.03 on gpu01, gpu02, gpu03; 470.57.02 on gpu04",
    )


def test_version_diff_names_only_the_odd_host() -> None:
    v = evaluate(*setup(four(gpu04=host_text("gpu04", horovod="0.27.0"))))
    assert v.refused
    assert [h.host for h in v.hosts if h.status is not HostStatus.OK] == ["gpu04"]
    assert v.host("gpu04").problems == (
        "horovod 0.27.0 (others 0.28.1); fix the host or pass --on-bad-host exclude",)
    inv, report = setup(four(gpu04=host_text("gpu04", horovod="0.27.0")))
    lax = evaluate(inv, report, PreflightPolicy(require_same_versions=False))
    assert not lax.refused and lax.host("gpu04").warnings == ("horovod 0.27.0 (others 0.28.1)",)


def test_missing_package_and_python_levels() -> None:
    texts = four(gpu02=host_text("gpu02", horovod="-"),
                 gpu03=host_text("gpu03", py_version="3.11.9"),
                 gpu04=host_text("gpu04", py_version="3.10.12"))
    v = evaluate(*setup(texts))
    assert v.host("gpu02").problems[0].startswith("horovod not installed (others 0.28.1)")
    assert v.host("gpu03").status is HostStatus.WARN  # same minor: a warning
    assert v.host("gpu03").warnings == ("python 3.11.9 (others 3.11.2)",)
    assert v.host("gpu04").problems[0].startswith("python 3.10.12 (others 3.11.2)")


def test_package_missing_everywhere_is_a_job_warning() -> None:
    v = evaluate(*setup({h: host_text(h, horovod="-") for h in ("gpu01", "gpu02")}))
    assert not v.refused and "horovod is not installed on any host" in v.warnings


def test_package_missing_everywhere_refuses_a_script_that_imports_it() -> None:
    """A launcher installed with pipx hands its own Python (no Horovod) to the ranks: a script
    that imports horovod is refused with the fix before any rank starts."""
    inv, report = setup({h: host_text(h, horovod="-") for h in ("gpu01", "gpu02")})
    v = evaluate(inv, report, PreflightPolicy(imported=("horovod", "tensorflow")))
    assert v.refused
    (problem,) = [p for p in v.problems if "horovod" in p]
    assert problem.startswith("the script imports horovod, which the ranks' Python has on no "
                              "host: pass --python")


def test_what_a_script_imports_is_read_from_its_import_lines() -> None:
    from ringtrain.probe.versiondiff import script_imports

    text = ("import os\nimport horovod.tensorflow.keras as hvd\n  from tensorflow import keras\n"
            "# import torch\nprint('import horovod')\n")
    assert script_imports(text) == ("horovod", "tensorflow")
    assert script_imports("from mpi4py import MPI\nimport numpy\n") == ()


def test_cpu_jobs_ignore_gpus() -> None:
    texts = {"cpu01": host_text("cpu01", gpu=("nvidia-smi: command not found", 127))}
    inv, report = setup(texts, slots=2)
    assert evaluate(inv, report).host("cpu01").problems[0].startswith(
        "nvidia-smi not found: install the NVIDIA driver on cpu01 or pass --cpu")
    v = evaluate(inv, report, PreflightPolicy(require_gpus=False))
    assert not v.refused and v.host("cpu01").status is HostStatus.OK


def test_duplicate_hostnames_refused() -> None:
    texts = four()
    texts["gpu02"] = str(texts["gpu02"]).replace("begin host@@\ngpu02", "begin host@@\ngpu01")
    v = evaluate(*setup(texts))
    assert v.host("gpu02").problems[0].startswith(
        "reports the same hostname 'gpu01' as gpu01: Open MPI would take them for one machine")


def test_localhost_uses_loopback() -> None:
    inv, report = setup({"localhost": host_text("vm01", gpu=("", 127))}, slots=2)
    v = evaluate(inv, report, PreflightPolicy(require_gpus=False))
    assert v.network is not None and v.network.include == ("127.0.0.0/8",)
    assert dict(v.network.env)["NCCL_SOCKET_IFNAME"] == "lo"


def test_everything_excluded_is_refused() -> None:
    inv, report = setup({"gpu01": host_text("gpu01", n_gpus=0, gpu=("No devices were found", 6))})
    v = evaluate(inv, report, PreflightPolicy(on_bad_host="exclude"))
    assert v.refused and v.problems == ("no usable host is left after excluding gpu01",)


# A GPU nvidia-smi cannot read, beside rows for the others, with exit 0 (issue 16): before, such
# a host was "ok" without a word whenever its rows covered its slots.
LOST_3A = "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error"


def golden_text(name: str) -> str:
    return (GOLDEN_DIR / "probe" / f"{name}.out").read_text()


def test_lost_gpu_with_exit_0_is_a_missing_gpu_in_nvidia_smis_words() -> None:
    v = evaluate(*setup({"gpu11": golden_text("gpu_lost_exit0")}, slots=8))
    h = v.host("gpu11")
    assert h.status is HostStatus.FAILED and v.refused
    assert h.problems == (f"expected 8 GPUs, nvidia-smi saw 7 healthy; nvidia-smi: {LOST_3A}; "
                          "fix the host or pass --on-bad-host exclude",)
    err = v.error()
    assert err is not None and LOST_3A in err.message
    v = evaluate(*setup({"gpu12": golden_text("gpu_is_lost_exit0")}, slots=4))
    assert v.host("gpu12").problems[0].startswith(
        "expected 4 GPUs, nvidia-smi saw 3 healthy; nvidia-smi: Unable to determine the device "
        "handle for GPU 0000:07:00.0: GPU is lost. Reboot the system to recover this GPU")


def test_lost_gpu_with_enough_left_for_the_slots_warns() -> None:
    v = evaluate(*setup({"gpu11": golden_text("gpu_lost_exit0")}, slots=4))
    h = v.host("gpu11")
    assert h.status is HostStatus.WARN and not v.refused and h.slots_usable == 4
    assert h.warnings == ("nvidia-smi could not read 1 GPU (7 healthy GPUs still cover the 4 "
                          f"slots); nvidia-smi: {LOST_3A}",)


def test_gpu_requiring_reset_is_missing_or_a_warning() -> None:
    text = golden_text("gpu_requires_reset")
    v = evaluate(*setup({"gpu13": text}, slots=8))
    assert v.host("gpu13").problems == (
        "expected 8 GPUs, nvidia-smi saw 6 healthy; GPU 5: memory.used [GPU requires reset]; "
        "utilization.gpu [GPU requires reset]; GPU 6: memory.total [Unknown Error]; memory.used "
        "[Unknown Error]; fix the host or pass --on-bad-host exclude",)
    v = evaluate(*setup({"gpu13": text}, slots=4))
    assert v.host("gpu13").status is HostStatus.WARN
    assert v.host("gpu13").warnings == (
        "GPU 5 unhealthy (memory.used [GPU requires reset]; utilization.gpu [GPU requires "
        "reset]); 6 healthy GPUs still cover the 4 slots",
        "GPU 6 unhealthy (memory.total [Unknown Error]; memory.used [Unknown Error]); 6 healthy "
        "GPUs still cover the 4 slots")


def test_only_lost_gpus_is_a_driver_failure_not_a_cpu_host() -> None:
    text = host_text("gpu01", gpu=(LOST_3A, 0))
    inv, report = setup({"gpu01": text})
    assert report.results[0].gpu.status is GpuStatus.FAILED
    (p,) = evaluate(inv, report).host("gpu01").problems
    assert p.startswith(f"nvidia-smi could not read any GPU: {LOST_3A}; run nvidia-smi on gpu01")


def test_other_lines_beside_the_rows_warn() -> None:
    said = "WARNING: infoROM is corrupted at gpu 0000:1B:00.0"
    v = evaluate(*setup({"gpu01": host_text("gpu01", gpu=(said + "\n" + gpu_rows(4), 0))}))
    assert v.host("gpu01").warnings == (f"nvidia-smi printed more than GPU rows: {said}",)


def test_busy_exclusion_still_names_the_busy_gpu_when_a_gpu_is_lost() -> None:
    rows = gpu_rows(8, busy={0: (30000, 97)})
    inv, report = setup({"gpu01": host_text("gpu01", gpu=(LOST_3A + "\n" + rows, 0))})
    v = evaluate(inv, report, PreflightPolicy(on_busy="exclude"))
    assert v.host("gpu01").problems[0].startswith("GPU 0 busy (30000 MiB used")
