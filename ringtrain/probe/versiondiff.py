"""The pre-flight's version comparison: which hosts' Python, TensorFlow, Horovod... differ from
the others, and a package the job needs that no host has. PURE."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ringtrain.probe.probe_parse import ProbeResult

NEEDED_EVERYWHERE = ("tensorflow", "horovod")
_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(tensorflow|horovod)\b", re.MULTILINE)


def script_imports(text: str) -> tuple[str, ...]:
    """The packages of NEEDED_EVERYWHERE a script's text imports at the start of a line."""
    return tuple(sorted(set(_IMPORT.findall(text))))


def version_diff(results: Sequence[ProbeResult], imported: Sequence[str] = ()) -> tuple[
        dict[str, list[str]], dict[str, list[str]], list[str], list[str]]:
    """Hosts whose versions differ from the majority -> (problems, warnings, job warnings, job
    problems). A needed package no host has is a job warning, or a job problem when the script
    ``imported`` it: the ranks' Python cannot run it (a launcher installed with pipx hands its
    own interpreter to the ranks)."""
    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    job: list[str] = []
    refused: list[str] = []
    comparable = [r for r in results if not r.versions.error]
    if len(comparable) < 1:
        return problems, warnings, job, refused
    packages = [name for name, _ in comparable[0].versions.items()]
    for package in packages:
        values = {r.host: dict(r.versions.items())[package] for r in comparable}
        if package in NEEDED_EVERYWHERE and not any(values.values()):
            if package in imported:
                refused.append(
                    f"the script imports {package}, which the ranks' Python has on no host: "
                    "pass --python with the interpreter of the environment that has it (a "
                    "ringtrain installed with pipx runs the ranks with its own), or install it")
            else:
                job.append(f"{package} is not installed on any host")
            continue
        key = _minor if package == "python" else _same
        majority = _majority([key(v) for v in values.values()])
        usual = _majority(list(values.values()))
        for host, value in values.items():
            shown = f"{package} {value or 'not installed'} (others {usual or 'not installed'})"
            if key(value) != majority:
                problems.setdefault(host, []).append(shown)
            elif value != usual and len(values) > 1:
                warnings.setdefault(host, []).append(shown)
    return problems, warnings, job, refused


def launcher_diff(results: Sequence[ProbeResult], own: tuple[str, int]) -> tuple[
        dict[str, list[str]], dict[str, list[str]]]:
    """Hosts whose ringtrain is not the launcher's ``own`` (version, control protocol) ->
    (problems, warnings). Every rank runs ``python -m ringtrain.rank.entry`` and teardown the
    reaper: a host without ringtrain, or with one of another protocol, would pass the rest of
    the pre-flight and fail at the start. Another release of the same protocol is a warning."""
    version, protocol = own
    fix = f"install ringtrain {version} in the ranks' Python there (README: On the GPU hosts)"
    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for r in results:
        have = r.versions.ringtrain
        if r.versions.error or have is None:  # not reported: judged by nothing here
            continue
        if have in ("", "unimportable"):
            said = "is not installed in" if have == "" else "cannot be imported by"
            problems.setdefault(r.host, []).append(f"ringtrain {said} the ranks' Python: {fix}")
        elif r.versions.ringtrain_protocol != protocol:
            problems.setdefault(r.host, []).append(
                f"ringtrain {have} (the launcher's {version}) speaks control protocol "
                f"{r.versions.ringtrain_protocol}, the launcher {protocol}: {fix}")
        elif have != version:
            warnings.setdefault(r.host, []).append(f"ringtrain {have} (the launcher's {version})")
    return problems, warnings


def _minor(v: str | None) -> str | None:
    return ".".join(v.split(".")[:2]) if v else None


def _same(v: str | None) -> str | None:
    return v


def _majority(values: Sequence[str | None]) -> str | None:
    """Most common value; ties go to the one seen first (inventory order)."""
    counts = Counter(values)
    best = max(counts.values())
    return next(v for v in values if counts[v] == best)


