"""The torchrun-style variables loggers and libraries read (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), set on every rank from what its launcher already told
it: Open MPI's ``OMPI_COMM_WORLD_*``, horovodrun Gloo's ``HOROVOD_*`` or Slurm's ``SLURM_*``.
They are always set from those: horovodrun and srun hand the launcher's whole environment to
the ranks, so a RANK left in the launcher's shell (a torchrun job, a pod) would otherwise give
every rank the same one. Standard library only (it runs on the hosts)."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) as each launcher names them
_SOURCES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
)
_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def torch_style(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set, from the first launcher whose rank variable is present."""
    for source in _SOURCES:
        if environ.get(source[0], "").isdigit():
            return {ours: environ[theirs] for ours, theirs in zip(_NAMES, source, strict=True)
                    if theirs is not None and environ.get(theirs, "").isdigit()}
    return {}


def apply(environ: MutableMapping[str, str] = os.environ) -> None:
    environ.update(torch_style(environ))
