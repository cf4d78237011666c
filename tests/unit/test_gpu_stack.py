"""Would a GPU host train on its GPUs: the probe's reading of the installed stack (pure)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ringtrain.probe.doctor import BY_CODE, FATAL, WARN
from ringtrain.probe.hostprobe import VERSIONS_PY
from ringtrain.probe.probe_parse import Versions, parse_python_versions
from ringtrain.probe.stack import stack_findings

CPU = Versions(python="3.11.7", tensorflow="2.15.1", tensorflow_dist="tensorflow-cpu",
               horovod="0.28.1", horovod_nccl=False)
GPU = Versions(python="3.11.7", tensorflow="2.15.1", tensorflow_dist="tensorflow",
               horovod="0.28.1", cudnn="nvidia-cudnn-cu12", cudnn_version="8.9.4.25",
               tf_cudnn="nvidia-cudnn-cu12==8.9.4.25", horovod_nccl=True)


def codes(v: Versions, gpus: int = 8) -> list[str]:
    return [f.code for f in stack_findings(v, gpus)]


def test_a_gpu_install_passes_and_a_cpu_install_is_named() -> None:
    assert codes(GPU) == []
    assert codes(CPU) == ["tf-cpu-build", "hvd-no-nccl"]
    (tf, _) = stack_findings(CPU, 8)
    assert tf.measured == "tensorflow-cpu 2.15.1 on a host with 8 GPUs"
    assert [BY_CODE[c].severity for c in codes(CPU)] == [FATAL, FATAL]


def test_tensorflow_without_cudnn_is_a_warning() -> None:
    v = Versions(tensorflow="2.15.1", tensorflow_dist="tensorflow", horovod="0.28.1",
                 horovod_nccl=True)
    assert codes(v) == ["tf-no-cudnn"] and BY_CODE["tf-no-cudnn"].severity == WARN
    assert codes(Versions(tensorflow="2.15.1", tensorflow_dist="tensorflow", cudnn="system")) == []


def test_a_cudnn_tensorflow_was_not_built_for_is_named() -> None:
    """The real H200 image's python (tests/unit/golden/probe/h200_real_torchpy_idle.out) has
    PyTorch's nvidia-cudnn-cu13 9.19 only: TF 2.15 (its and-cuda extra pins cu12 8.9) dlopens
    libcudnn.so.8 and would train on the CPU."""
    h200 = parse_python_versions(_section("h200_real_torchpy_idle", "python"), 0)
    assert (h200.cudnn, h200.cudnn_version, h200.tensorflow) == (
        "nvidia-cudnn-cu13", "9.19.0.56", None)
    assert codes(h200) == []  # no TensorFlow there: nothing to judge (the gate refuses a
    with_tf = replace(h200, tensorflow="2.15.1", tensorflow_dist="tensorflow",  # script
                      tf_cudnn="nvidia-cudnn-cu12==8.9.4.25")  # that needs it)
    assert codes(with_tf) == ["tf-cudnn-mismatch"]
    (f,) = stack_findings(with_tf, 1)
    assert f.measured == ("tensorflow 2.15.1 on a host with 1 GPU asks for nvidia-cudnn-cu12 "
                          "8.9.4.25 (its and-cuda extra); this host has nvidia-cudnn-cu13 "
                          "9.19.0.56, for another CUDA")
    assert BY_CODE["tf-cudnn-mismatch"].severity == WARN
    old_major = replace(GPU, cudnn_version="9.1.0.70")  # TF 2.15 with cuDNN 9 for CUDA 12
    assert codes(old_major) == ["tf-cudnn-mismatch"]
    system = replace(GPU, cudnn="system", cudnn_version="9")
    assert "asks for cuDNN 8" in stack_findings(system, 4)[0].measured
    assert codes(replace(GPU, cudnn="system", cudnn_version="8")) == []
    assert codes(replace(GPU, tf_cudnn=None)) == []  # no pin (a conda or source build): no claim


def _section(name: str, section: str) -> str:
    from tests.golden import GOLDEN_DIR

    text = (GOLDEN_DIR / "probe" / f"{name}.out").read_text()
    return text.split(f"@@ringtrain:begin {section}@@\n", 1)[1].split("@@ringtrain:end", 1)[0]


@pytest.mark.parametrize("v", [
    replace(CPU, sim_cpu_training=True),
    Versions(error="python not found"),
])
def test_not_judged_when_declared_or_unknown(v: Versions) -> None:
    assert codes(v) == []


def test_not_judged_without_gpus_the_job_uses() -> None:
    assert codes(CPU, gpus=0) == []
    assert codes(Versions(horovod="0.28.1")) == []  # NCCL unknown (no library found): no claim


def test_the_probe_lines_parse() -> None:
    v = parse_python_versions("python 3.11.7\ntensorflow 2.15.1\ntensorflow-cpu -\n"
                              "horovod 0.28.1\ncudnn nvidia-cudnn-cu12\nhorovod-nccl yes\n"
                              "sim-cpu-training -\n", 0)
    assert (v.cudnn, v.horovod_nccl, v.sim_cpu_training) == ("nvidia-cudnn-cu12", True, False)
    v = parse_python_versions("cudnn -\nhorovod-nccl no\nsim-cpu-training yes\n", 0)
    assert (v.cudnn, v.horovod_nccl, v.sim_cpu_training) == (None, False, True)


def test_the_probe_reads_this_machines_cpu_build(tmp_path: Path) -> None:
    """This machine: tensorflow-cpu and a Horovod built without NCCL (no ncclAllReduce in its
    library), as the simulated hosts have; a flag file named by the sim's variable declares it."""
    flag = tmp_path / "trains-on-cpu"
    flag.write_text("yes\n")
    done = subprocess.run([sys.executable, "-c", VERSIONS_PY], capture_output=True, text=True,
                          env={"RINGTRAIN_SIM_TRAINS_ON_CPU": str(flag), "PATH": "/usr/bin"},
                          check=True, timeout=60)
    v = parse_python_versions(done.stdout, 0)
    assert (v.tensorflow_dist, v.horovod_nccl, v.sim_cpu_training) == (
        "tensorflow-cpu", False, True), done.stdout
    # TensorFlow's own METADATA names the cuDNN its and-cuda extra installs (2.15.1: cu12 8.9)
    assert v.tf_cudnn == "nvidia-cudnn-cu12==8.9.4.25", done.stdout
    assert codes(v) == []  # declared
    assert {f.code for f in stack_findings(replace(v, sim_cpu_training=False), 4)} == {
        "tf-cpu-build", "hvd-no-nccl"}


def test_tf_strategies_ignore_horovods_nccl() -> None:
    from ringtrain.assembly import LaunchOptions, build_spec
    from ringtrain.probe.gate import policy_for

    hvd = build_spec(LaunchOptions(script="t.py"), Path("/w"))
    tf = build_spec(LaunchOptions(script="t.py", strategy="tf-multiworker"), Path("/w"))
    assert "hvd-no-nccl" not in dict(policy_for(hvd, None).doctor_actions)
    assert dict(policy_for(tf, None).doctor_actions)["hvd-no-nccl"] == "ignore"
    mine = build_spec(LaunchOptions(script="t.py", strategy="tf-multiworker",
                                    on_bad_host=("hvd-no-nccl=fail",)), Path("/w"))
    assert dict(policy_for(mine, None).doctor_actions)["hvd-no-nccl"] == "fail"
