"""Would this host train on its GPUs? Its TensorFlow build and cuDNN, and Horovod's NCCL. PURE.

A GPU host can train on its CPU without a word: ``tensorflow-cpu`` sees no GPU; ``tensorflow``
without cuDNN logs "Cannot dlopen some GPU libraries" and carries on on the CPU; a Horovod
built without ``HOROVOD_GPU_OPERATIONS=NCCL`` all-reduces through host memory over MPI or
Gloo. The probe reads each from the host's installed files (``hostprobe.VERSIONS_PY``: the
distributions, a pip or system cuDNN, NCCL's ``ncclAllReduce`` in Horovod's TF op library),
without importing TensorFlow. Judged only on a host whose GPUs the job uses, and not where
the simulated cluster declares that its fake GPUs train on the CPU.
"""

from __future__ import annotations

from ringtrain.probe.doctor import Finding
from ringtrain.probe.probe_parse import Versions


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
    if v.horovod and v.horovod_nccl is False:
        out.append(Finding("hvd-no-nccl", None, f"horovod {v.horovod} built without NCCL {on}",
                           "a Horovod built with NCCL"))
    return tuple(out)
