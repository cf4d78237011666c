"""The launcher's side of GPU-to-GPU inside each host (see intraprog.py): run the program on
every host at once through the Remote seam and say, per host, what was measured or why not."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ringtrain.hostfile import Inventory
from ringtrain.rank import isolated
from ringtrain.remote import CmdResult, Remote

MARK = "RINGCHECK-INTRA "


def measure_intra(
    remote: Remote, inventory: Inventory, python: str, timeout_s: float = 180.0
) -> dict[str, dict[str, Any]]:
    """host -> the program's answer (``status``: ok, no-tool, one-gpu, no-gpu, failed)."""
    argv = isolated.module_argv(python, "ringtrain.ringcheck.intraprog")
    answers = remote.run_each([(h, argv) for h in inventory.hosts], timeout_s)
    return {h.name: read_answer(answers.get(h.name)) for h in inventory.hosts}


def read_answer(res: CmdResult | None) -> dict[str, Any]:
    if res is None or res.error is not None:
        return {"status": "failed", "note": "no answer" if res is None else res.error}
    for line in reversed(res.stdout.splitlines()):
        _, mark, body = line.partition(MARK)
        if mark:
            try:
                data: dict[str, Any] = json.loads(body)
                return data
            except ValueError:
                break
    tail = " | ".join(res.stderr.strip().splitlines()[-2:])
    return {"status": "failed", "note": f"exit {res.exit_code}: {tail or 'no result line'}"}


def describe_intra(intra: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per host, for the console."""
    lines = []
    for host, a in intra.items():
        status, gpus = a.get("status"), a.get("gpus")
        if status == "ok":
            wrong = "; WRONG RESULTS (NCCL reported errors)" if a.get("wrong") else ""
            lines.append(f"{host}: {gpus} GPUs, NCCL all-reduce bus bandwidth "
                         f"{a['avg_busbw_GBps']:.1f} GB/s average, "
                         f"{a.get('peak_busbw_GBps') or 0:.1f} GB/s at 256 MiB{wrong}")
        elif status == "no-tool":
            lines.append(f"{host}: {gpus} GPUs, GPU-to-GPU not measured: {a.get('note')} "
                         "(build https://github.com/NVIDIA/nccl-tests and put it on PATH)")
        elif status == "failed":
            lines.append(f"{host}: GPU-to-GPU not measured: {a.get('note')}")
    return lines
