"""What a launch runs on every rank, checked before anything starts: a Python script told from
a module or a program (and refused when it is not there), and a recorded launch read back from
a run's plan.json (``--from``)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from ringtrain import trust
from ringtrain.assembly.launch_spec import LaunchOptions, build_spec
from ringtrain.errors import UsageError
from ringtrain.launch.plan.make import read_recorded_spec
from ringtrain.spec import Entry, LaunchSpec


def resolve_entry(spec: LaunchSpec) -> LaunchSpec:
    """Tell a Python script from a program, and refuse what is not there: a SCRIPT that is an
    executable file without a Python #! line, or a bare name found on PATH, is a program."""
    if spec.entry is Entry.MODULE:
        top = spec.script.partition(".")[0]
        if spec.python is None and not (
            (spec.working_dir / top).is_dir() or (spec.working_dir / f"{top}.py").is_file()
            or importlib.util.find_spec(top) is not None
        ):
            raise UsageError(
                f"module {spec.script!r} not found: no {top}/ or {top}.py in "
                f"{spec.working_dir} and no installed {top!r}",
                "run from the directory that holds the package, or install it",
            )
        return spec
    path = spec.working_dir / spec.script
    if path.is_file():
        if path.suffix != ".py" and os.access(path, os.X_OK) and not _python_shebang(path):
            return replace(spec, entry=Entry.EXECUTABLE, script=str(path))
        return spec
    if "/" not in spec.script and shutil.which(spec.script):
        return replace(spec, entry=Entry.EXECUTABLE)
    raise UsageError(
        f"script {spec.script!r} not found in {spec.working_dir}",
        "give the path of a training script (or -m MODULE, or a program on PATH)",
    )


def _python_shebang(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


MAX_PLAN_BYTES = 64 << 20  # a plan.json of 10,000 hosts is a few MiB


def read_run_spec(run_dir: Path) -> LaunchSpec:
    """The LaunchSpec a run recorded (``launch --from RUN_DIR``): plan.json opened once (a
    link at its end read, never followed by the open), judged on what was opened, and read
    from that descriptor."""
    uid = os.geteuid()
    for path in (run_dir / "attempt-1" / "plan.json", run_dir / "plan.json"):
        try:
            fd, owner = trust.open_file(path)
            break
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            raise UsageError(f"--from {run_dir}: cannot read {path}: {err.strerror or err}",
                             "pass another run directory") from None
    else:
        raise UsageError(
            f"--from {run_dir}: no plan.json there (looked for attempt-1/plan.json)",
            "pass a run directory, e.g. runs/20261124-010203-ab12 (see `ringtrain runs`)",
        )
    try:
        reason = trust.untrusted_file(owner, uid)
        if reason is not None:  # plan.json says what runs, and where: only the user's own
            raise UsageError(f"--from {run_dir}: not launching what {path} says: {reason}",
                             trust.fix_for(path, uid))
        data = json.loads(trust.read_open(fd, MAX_PLAN_BYTES))
    except (OSError, ValueError, RecursionError) as err:
        raise UsageError(f"cannot read {path}: {err}", "pass another run directory") from None
    finally:
        os.close(fd)
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a launch plan", "pass another run directory")
    return read_recorded_spec(data)


def differences(spec: LaunchSpec) -> tuple[str, ...]:
    """What a recorded launch asks beyond a plain ``ringtrain launch SCRIPT``, one
    ``field: value`` each (``launch --from`` shows them before it runs anything)."""
    plain = build_spec(LaunchOptions(script=spec.script), spec.working_dir).to_json()
    out: list[str] = []

    def walk(ours: Any, base: Any, where: str) -> None:
        if isinstance(ours, dict) and isinstance(base, dict):
            for key in ours:
                walk(ours[key], base.get(key), f"{where}.{key}" if where else key)
        elif ours != base and where not in ("script", "working_dir", "version"):
            out.append(f"{where}: {json.dumps(ours)}")

    walk(spec.to_json(), plain, "")
    return tuple(out)
