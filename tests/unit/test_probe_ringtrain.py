"""The pre-flight reads each host's own ringtrain (the ranks run ``python -m
ringtrain.rank.entry``): the probe's real Python snippet, run by real interpreters, and the
verdict that refuses a host without it, or with another control protocol, naming the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ringtrain
from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import VERSIONS_PY
from ringtrain.probe.probe_parse import ProbeReport, parse_probe_output, parse_python_versions
from ringtrain.probe.verdict import HostStatus, PreflightPolicy, evaluate
from ringtrain.rank.events import PROTOCOL
from tests.golden import GOLDEN_DIR
from tests.unit.test_preflight import host_text, setup


def _versions(python: str, pythonpath: Path | None = None):  # type: ignore[no-untyped-def]
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([python, "-c", VERSIONS_PY], cwd="/", env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    return parse_python_versions(out.stdout, out.returncode, python)


def test_the_ranks_python_with_ringtrain_reports_its_version_and_protocol() -> None:
    seen = _versions(sys.executable, Path(ringtrain.__file__).parents[1])  # this tree's
    assert (seen.ringtrain, seen.ringtrain_protocol) == (ringtrain.__version__, PROTOCOL)


def _package(root: Path, init: str, *, with_rank: bool) -> Path:
    (root / "ringtrain").mkdir(parents=True)
    (root / "ringtrain" / "__init__.py").write_text(init)
    if with_rank:
        (root / "ringtrain" / "rank").mkdir()
        (root / "ringtrain" / "rank" / "__init__.py").write_text("")
        (root / "ringtrain" / "rank" / "events.py").write_text("PROTOCOL = 7\n")
    return root


def _bare_python() -> str:
    """An interpreter whose site-packages hold no ringtrain (the system's)."""
    for candidate in ("/usr/bin/python3", shutil.which("python3") or ""):
        if candidate and subprocess.run(
                [candidate, "-c", "import ringtrain"], cwd="/", capture_output=True,
                env={"PATH": "/usr/bin:/bin"}, check=False).returncode != 0:
            return candidate
    pytest.skip("no Python without ringtrain on this machine")


def test_a_python_without_it_an_older_one_and_a_broken_one(tmp_path: Path) -> None:
    bare = _bare_python()
    assert _versions(bare).ringtrain == ""
    old = _package(tmp_path / "old", '__version__ = "0.0.9"\n', with_rank=False)
    seen = _versions(bare, old)  # a release from before the protocol had a number
    assert (seen.ringtrain, seen.ringtrain_protocol) == ("0.0.9", 0)
    other = _versions(bare, _package(tmp_path / "new", '__version__ = "9.0"\n', with_rank=True))
    assert (other.ringtrain, other.ringtrain_protocol) == ("9.0", 7)
    broken = _package(tmp_path / "broken", "raise RuntimeError('half installed')\n",
                      with_rank=False)
    assert _versions(bare, broken).ringtrain == "unimportable"


def _said(version: str, protocol: int | None) -> str:
    lines = "\nringtrain -" if version == "" else f"\nringtrain {version}"
    if protocol is not None:
        lines += f"\nringtrain-protocol {protocol}"
    return ("python 3.11.2\ntensorflow 2.15.1\ntensorflow-cpu -\ntensorflow-gpu -\n"
            f"horovod 0.28.1\nmpi4py 4.1.2{lines}")


OURS = PreflightPolicy(ringtrain=("1.4.0", 3))


@pytest.mark.parametrize(("version", "protocol", "needle"), [
    ("", None, "ringtrain is not installed in the ranks' Python"),
    ("unimportable", None, "ringtrain cannot be imported by the ranks' Python"),
    ("1.2.0", 2, "ringtrain 1.2.0 (the launcher's 1.4.0) speaks control protocol 2, the "
                 "launcher 3"),
])
def test_a_host_without_the_launchers_ringtrain_is_refused_with_the_fix(
        version: str, protocol: int | None, needle: str) -> None:
    texts = {f"gpu0{i}": host_text(f"gpu0{i}", python=(_said("1.4.0", 3), 0)) for i in (1, 2)}
    texts["gpu03"] = host_text("gpu03", python=(_said(version, protocol), 0))
    v = evaluate(*setup(texts), OURS)  # type: ignore[arg-type]
    bad = {h.host: h for h in v.hosts if h.status is HostStatus.FAILED}
    assert list(bad) == ["gpu03"]
    assert any(needle in p and "install ringtrain 1.4.0" in p for p in bad["gpu03"].problems)
    err = v.error()
    assert err is not None and "gpu03" in str(err)


def test_another_release_of_the_same_protocol_is_a_warning() -> None:
    texts = {"gpu01": host_text("gpu01", python=(_said("1.4.0", 3), 0)),
             "gpu02": host_text("gpu02", python=(_said("1.3.9", 3), 0))}
    v = evaluate(*setup(texts), OURS)  # type: ignore[arg-type]
    assert all(h.usable for h in v.hosts)
    (two,) = [h for h in v.hosts if h.host == "gpu02"]
    assert "ringtrain 1.3.9 (the launcher's 1.4.0)" in two.warnings


def test_a_real_gpu_hosts_capture_names_its_ringtrain_and_passes() -> None:
    """The probe run on a real H100 (driver 580, golden h100_real_idle.out): its ringtrain
    lines read back, and the launcher of that version and protocol accepts the host."""
    text = (GOLDEN_DIR / "probe" / "h100_real_idle.out").read_text()
    seen = parse_probe_output("vm", text)
    assert (seen.versions.ringtrain, seen.versions.ringtrain_protocol) == ("0.1.0", 1)
    assert seen.gpu.gpus[0].name == "NVIDIA H100 80GB HBM3"
    v = evaluate(Inventory((Host("vm", 1),)), ProbeReport((seen,)),
                 PreflightPolicy(ringtrain=("0.1.0", 1), require_same_versions=False))
    assert all(not any("ringtrain" in p for p in h.problems) for h in v.hosts)
    newer = evaluate(Inventory((Host("vm", 1),)), ProbeReport((seen,)),
                     PreflightPolicy(ringtrain=("0.2.0", 2)))
    assert any("speaks control protocol 1, the launcher 2" in p for p in newer.hosts[0].problems)
    # the capture is of protocol 1; this launcher's proofs cover the hello (protocol 2, issue
    # 40): it refuses that host, naming the release to install
    ours = evaluate(Inventory((Host("vm", 1),)), ProbeReport((seen,)), PreflightPolicy())
    assert PROTOCOL > 1 and any(f"speaks control protocol 1, the launcher {PROTOCOL}" in p
                                for p in ours.hosts[0].problems)
