"""Side effects stay at the edges: which modules may import what (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "ringtrain"

# module -> places allowed to import it (relative to ringtrain/; a trailing '/' means a directory)
ALLOWED = {
    "subprocess": (
        "launch/remote.py",
        "launch/run.py",
        "launch/supervise.py",
        "launch/discover.py",
        "launch/schedulers_io.py",
        "checkpoint/",
        "sim/",
        "bench/",
    ),
    "paramiko": ("launch/remote.py",),
    "fabric": ("launch/remote.py",),
    "invoke": ("launch/remote.py",),
    "tensorflow": ("models/", "bench/"),
    "horovod": ("models/", "bench/"),
    "mpi4py": ("launch/rankexec.py", "models/", "bench/"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _allowed(rel: str, places: tuple[str, ...]) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in places)


SOURCES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_respect_layering(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    bad = [m for m in _imports(path) & ALLOWED.keys() if not _allowed(rel, ALLOWED[m])]
    assert not bad, f"{rel} imports {bad}; allowed only in {[ALLOWED[m] for m in bad]}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shell_true_no_print_outside_cli(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "shell":
            assert not (isinstance(node.value, ast.Constant) and node.value.value is True), rel
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
        ):
            # cli/ prints; models/, bench/ and the sim helpers are programs whose output is read
            assert rel.startswith(("cli/", "models/", "bench/", "sim/fake_", "sim/_hostinit")), (
                f"print() in {rel}"
            )


def test_the_guard_sees_the_whole_package() -> None:
    assert len(SOURCES) > 10
    assert _imports(ROOT / "launch" / "run.py") >= {"subprocess"}
