"""The torchrun-style variables loggers and libraries read (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), set on every rank from what its launcher already told
it: Open MPI's ``OMPI_COMM_WORLD_*``, horovodrun Gloo's ``HOROVOD_*`` or Slurm's ``SLURM_*``.
They are always set from those: horovodrun and srun hand the launcher's whole environment to
the ranks, so a RANK left in the launcher's shell (a torchrun job, a pod) would otherwise give
every rank the same one; one of them the launcher does not tell is removed for that reason.
Standard library only (it runs on the hosts).

srun names no local size: it is this node's count in the step's ``SLURM_STEP_TASKS_PER_NODE``
(``2(x3),1``, one count per node of the step), at the node's index in the step
(``SLURM_NODEID``). ``SLURM_NTASKS_PER_NODE`` is not it: a step inherits the batch job's."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping

# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) as each launcher names them
_SOURCES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
)
_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
_COUNTS_RE = re.compile(r"^(\d{1,6})(?:\(x(\d{1,6})\))?\Z")


def torch_style(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set, from the first launcher whose rank variable is present."""
    for source in _SOURCES:
        if environ.get(source[0], "").isdigit():
            out = {ours: environ[theirs] for ours, theirs in zip(_NAMES, source, strict=True)
                   if theirs is not None and environ.get(theirs, "").isdigit()}
            if source[0] == "SLURM_PROCID":
                local = slurm_local_size(environ)
                out.update({"LOCAL_WORLD_SIZE": local} if local else {})
            return out
    return {}


def slurm_local_size(environ: Mapping[str, str]) -> str | None:
    """This node's task count in the srun step; None when the step does not say."""
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    node = environ.get("SLURM_NODEID", "")
    if not per_node or not node.isdigit():
        return None
    counts: list[str] = []
    for part in per_node.split(","):
        m = _COUNTS_RE.match(part.strip())
        if m is None:
            return None
        counts += [m.group(1)] * int(m.group(2) or 1)
    return counts[int(node)] if int(node) < len(counts) else None


def apply(environ: MutableMapping[str, str] = os.environ) -> None:
    told = torch_style(environ)
    if told:  # a launcher ringtrain knows: none of the four from the launcher's shell stays
        for name in _NAMES:
            environ.pop(name, None)
    environ.update(told)
