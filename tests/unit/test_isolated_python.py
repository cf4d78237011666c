"""Every Python ringtrain starts itself keeps the working directory off ``sys.path`` (issue 40).

Reproduces the finding: ``ringtrain check -H localhost:2`` ran the probe's ``python -c`` in the
working directory, which ``-c`` puts first on ``sys.path``, and a ``sysconfig.py`` planted
there by another user ran as root. Then the helpers ringtrain runs on the hosts (the reaper,
the secrets file, the TF port check, the ring check's GPU-to-GPU program), started here from a
directory full of planted modules, run none of them; the warm process runs from ``/``. A guard
keeps every ``-m ringtrain...`` command ringtrain builds on ``isolated.py``'s two forms.

The helpers run with ``-I``, so they import ringtrain from the virtual environment (an
editable install of the main checkout), not from this checkout's PYTHONPATH: what these tests
check is that nothing comes from the working directory.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli import cli
from ringtrain.hostfile import Host, Inventory
from ringtrain.launch.elastic.warmspares import warm_argv
from ringtrain.launch.job.deliver import secretfile_argv
from ringtrain.launch.supervise.teardown import reaper_argv
from ringtrain.probe.tfports import check_ports
from ringtrain.rank import isolated
from ringtrain.remote import LocalRemote
from ringtrain.ringcheck.intra import measure_intra

ROOT = Path(__file__).resolve().parents[2] / "ringtrain"
NOBODY = 65534
# modules the probe's snippets and the helpers import early: each, planted, leaves a mark
PLANTED = ("sysconfig", "re", "json", "argparse", "mmap", "socket", "shutil")


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory where another user planted modules that shadow the standard
    library and ringtrain; each leaves its name in ``ran`` when imported."""
    here = tmp_path / "shared"
    here.mkdir()
    marks = tmp_path / "ran"
    code = f"open({str(marks)!r}, 'a').write(__name__ + '\\n')\n"
    for name in PLANTED:
        (here / f"{name}.py").write_text(code)
    (here / "ringtrain").mkdir()
    (here / "ringtrain" / "__init__.py").write_text(code)
    for key in [k for k in os.environ if k.startswith("RINGTRAIN_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if os.geteuid() == 0:
        for path in (here, *here.rglob("*")):
            os.chown(path, NOBODY, NOBODY)
    monkeypatch.chdir(here)
    return marks


def test_check_on_localhost_runs_no_module_from_the_working_directory(planted: Path) -> None:
    result = CliRunner().invoke(cli, ["check", "-H", "localhost:2", "--json"])
    assert not planted.exists(), f"planted modules ran: {planted.read_text()}"
    shown = result.output
    assert '"python": "{}.{}.{}"'.format(*sys.version_info[:3]) in shown, shown  # it did probe


def test_ringtrains_helpers_on_a_host_import_nothing_from_the_working_directory(
        planted: Path) -> None:
    local, run_id = LocalRemote(), f"tiso{uuid.uuid4().hex[:8]}"
    secrets = f"~/.ringtrain/secrets/{run_id}-1.json"
    for argv in (reaper_argv(sys.executable, run_id, {}),
                 secretfile_argv(sys.executable, "remove", secrets)):
        assert argv[1:3] == ("-I", "-m")
        res = local.run_one("localhost", argv, 60)
        assert res.exit_code == 0 and "Traceback" not in res.stderr, (argv, res)
    reaped = local.run_one("localhost", reaper_argv(sys.executable, run_id, {}), 60)
    assert json.loads(reaped.stdout)["left"] == []
    host = Host("localhost", 1)
    assert check_ports(local, [host], {"localhost": [0]}, 0, sys.executable) == []
    intra = measure_intra(local, Inventory((host,)), sys.executable, timeout_s=60)
    assert intra["localhost"]["status"] in ("no-tool", "no-gpu", "one-gpu", "ok"), intra
    assert not planted.exists(), f"planted modules ran: {planted.read_text()}"


def test_the_warm_process_starts_from_root(planted: Path, tmp_path: Path) -> None:
    """The warm process is not ``-I`` (it needs the ranks' PYTHONPATH and site-packages):
    it is started from / instead, as the same process (exec), its argv unchanged."""
    seen = tmp_path / "seen"
    python = tmp_path / "python"  # stands in for the host's Python: where, and with what
    python.write_text(f'#!/bin/sh\npwd > {seen}\nprintf "%s\\n" "$@" >> {seen}\n')
    python.chmod(0o755)
    res = LocalRemote().run_one("localhost", warm_argv(str(python), "r1", 0), 30)
    assert res.exit_code == 0, res
    where, *args = seen.read_text().splitlines()
    assert where == "/" and args[:3] == ["-m", "ringtrain.rank.warm", "r1"]
    res = LocalRemote().run_one("localhost", isolated.from_root(
        (sys.executable, "-c", "import json, sys; print(sys.path[0] or '(cwd)')")), 30)
    assert res.stdout.strip() == "(cwd)" and not planted.exists(), res


# The only places that build a `-m ringtrain...` command outside isolated.py, and why.
NOT_ISOLATED = {
    "launch/plan/launchers.py": "the rank entry: it runs the user's own program in the user's "
                           "working directory, by design",
    "launch/elastic/warmspares.py": "the warm process: isolated.from_root (it needs the ranks' "
                            "PYTHONPATH and site-packages, then becomes a rank)",
    "schedulers/batch.py": "the batch script's `python -m ringtrain launch`: the user's own "
                           "launch, in the directory the user submits from",
}


def test_every_ringtrain_module_command_goes_through_isolated() -> None:
    """A sequence literal holding "-m" then "ringtrain..." is a Python that ringtrain starts
    itself: it is built by isolated.module_argv (``-I``), or listed above with the reason.
    The simulated cluster's and the benchmarks' own tools (sim/, bench/) run from a
    checkout, by the developer."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("sim/", "bench/")) or rel == "rank/isolated.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Tuple | ast.List):
                continue
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for a, b in itertools.pairwise(words):
                if a == "-m" and isinstance(b, str) and b.split(".")[0] == "ringtrain":
                    found.append(rel)
    assert sorted(set(found)) == sorted(NOT_ISOLATED), found
