"""scripts/bootstrap.sh --plan: which TensorFlow and Horovod build it would install, and why.

The GPU build where nvidia-smi lists a GPU (a real H200's answer is in the closing note of the
session that captured it); this machine has none, so the CPU build unless RINGTRAIN_TF asks."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def plan(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("RINGTRAIN_TF", "HOROVOD_CUDA_HOME")}
    return subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), "--plan"],
                          capture_output=True, text=True, timeout=60, env={**base, **env},
                          cwd=tmp_path, check=False)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_no_gpu_gets_the_cpu_build_and_changes_nothing(tmp_path: Path) -> None:
    done = plan(tmp_path, RINGTRAIN_VENV=str(tmp_path / "venv"))
    assert done.returncode == 0, done.stderr
    assert "TensorFlow: cpu build (nvidia-smi lists no GPU)" in done.stderr
    assert ("tensorflow-cpu==2.15.1; Horovod 0.28.1+ringtrain.4 without GPU operations"
            in done.stderr)
    assert not (tmp_path / "venv").exists()  # a plan installs nothing


def test_asked_for_the_gpu_build_it_names_the_toolkit_it_needs(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    done = plan(tmp_path, RINGTRAIN_TF="gpu", HOROVOD_CUDA_HOME=str(cuda))
    assert done.returncode == 0, done.stderr
    assert "TensorFlow: gpu build (RINGTRAIN_TF=gpu)" in done.stderr
    assert "tensorflow[and-cuda]==2.15.1" in done.stderr
    assert f"HOROVOD_GPU_OPERATIONS=NCCL: nvcc of {cuda}" in done.stderr
    # no nvcc there: its CUDA version is not known, and TF 2.15 is built for CUDA 12
    assert "warning: that toolkit is CUDA of unknown version" in done.stderr
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        done = plan(tmp_path, RINGTRAIN_TF="gpu")
        assert "needs the CUDA toolkit's nvcc: none on PATH or in /usr/local/cuda" in done.stderr


def test_a_bad_choice_is_refused_with_the_fix(tmp_path: Path) -> None:
    done = plan(tmp_path, RINGTRAIN_TF="rocm")
    assert done.returncode == 1
    assert "error: RINGTRAIN_TF=rocm" in done.stderr
    assert "fix: set RINGTRAIN_TF=cpu or RINGTRAIN_TF=gpu, or unset it" in done.stderr
