"""The facts of the machine a launch runs on (``SessionEnv``), and a new run's id."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionEnv:
    """The facts of the machine the launcher runs on, gathered once at the edge."""

    run_id: str
    environ: Mapping[str, str]
    is_root: bool
    python: str
    ssh: str = "/usr/bin/ssh"  # the ssh on PATH (what horovodrun's shim runs)

    @classmethod
    def here(cls, run_id: str | None = None) -> SessionEnv:
        return cls(
            run_id=run_id or new_run_id(),
            environ=dict(os.environ),
            is_root=os.geteuid() == 0,
            python=sys.executable,
            ssh=shutil.which("ssh") or "/usr/bin/ssh",
        )


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
