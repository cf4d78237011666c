"""Would this host train on its GPUs? Its TensorFlow build and cuDNN, and Horovod's NCCL. PURE.

A GPU host can train on its CPU without a word: ``tensorflow-cpu`` sees no GPU; ``tensorflow``
without cuDNN, or with a cuDNN of another major or CUDA than it was built for, logs "Cannot
dlopen some GPU libraries" and carries on on the CPU; a Horovod
built without ``HOROVOD_GPU_OPERATIONS=NCCL`` all-reduces through host memory over MPI or
Gloo. The probe reads each from the host's installed files (``hostprobe.VERSIONS_PY``: the
distributions, a pip or system cuDNN, NCCL's ``ncclAllReduce`` in Horovod's TF op library),
without importing TensorFlow. Judged only on a host whose GPUs the job uses, and not where
the simulated cluster declares that its fake GPUs train on the CPU.
"""

from __future__ import annotations

from ringtrain.probe.doctor import Finding
from ringtrain.probe.probe_parse import Versions


def cudnn_mismatch(v: Versions) -> str | None:
    """Why TensorFlow would not load this host's cuDNN, or None (a match, or not known).

    TensorFlow says what it was built for in its ``and-cuda`` extra (``nvidia-cudnn-cu12==8.9``
    for 2.15): it dlopens ``libcudnn.so.<major>`` of that major, from a pip wheel for that CUDA
    (a real H200 image with PyTorch for CUDA 13 has ``nvidia-cudnn-cu13`` 9.19 only)."""
    if not v.tf_cudnn or "==" not in v.tf_cudnn or not v.cudnn or not v.cudnn_version:
        return None
    want, want_v = v.tf_cudnn.split("==", 1)
    major = want_v.split(".")[0]
    have = v.cudnn_version.split(".")[0]
    if v.cudnn not in ("system", want):
        return (f"asks for {want} {want_v} (its and-cuda extra); this host has {v.cudnn} "
                f"{v.cudnn_version}, for another CUDA")
    if have != major:
        return (f"asks for cuDNN {major} ({want} {want_v}); this host has cuDNN {have} "
                f"({v.cudnn} {v.cudnn_version})")
    return None


def stack_findings(v: Versions, gpus: int) -> tuple[Finding, ...]:
    """Findings for a host with ``gpus`` GPUs the job uses (0: none are judged)."""
    if gpus <= 0 or v.sim_cpu_training or v.error:
        return ()
    out = []
    on = f"on a host with {gpus} GPU{'s' if gpus != 1 else ''}"
    if v.tensorflow_dist == "tensorflow-cpu":
        out.append(Finding("tf-cpu-build", None, f"tensorflow-cpu {v.tensorflow} {on}",
                           "a TensorFlow that sees the GPUs"))
    elif v.tensorflow and v.cudnn is None:
        out.append(Finding("tf-no-cudnn", None, f"{v.tensorflow_dist} {v.tensorflow} {on}, no "
                           "cuDNN found (pip nvidia-cudnn-cu*, or libcudnn.so on the loader's "
                           "paths)", "cuDNN TensorFlow can load"))
    elif v.tensorflow and (why := cudnn_mismatch(v)):
        out.append(Finding("tf-cudnn-mismatch", None, f"{v.tensorflow_dist} {v.tensorflow} {on}"
                           f" {why}", "the cuDNN TensorFlow was built for"))
    if v.horovod and v.horovod_nccl is False:
        out.append(Finding("hvd-no-nccl", None, f"horovod {v.horovod} built without NCCL {on}",
                           "a Horovod built with NCCL"))
    return tuple(out)
