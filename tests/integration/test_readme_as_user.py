"""The README's two set-up commands, run by a user who is not root (issue 27, item 5).

A copy of this checkout, owned by ``nobody``, with a home under /tmp and the system's Python on
PATH (the tests' own interpreter lives in root's 0700 home): ``make demo`` must bootstrap its
own venv and train on local slots to the target accuracy, and ``make test`` must then find
that venv up to date and run ruff, mypy and pytest. The suite itself is not run a second time
from inside itself: ``make test`` gets one unit test file through ``PYTEST_ADDOPTS``.

Horovod is compiled from source by the root bootstrap this suite was started by; pip keeps
that wheel in root's cache, and the user's pip is pointed at a copy of it (a user with their
own cache gets the same on their second venv). Without it the user's bootstrap compiles
Horovod itself, which is slower but tests the same thing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]
USER = "nobody"
PASSED_ON = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT",
             "PIP_DEFAULT_TIMEOUT", "PIP_TRUSTED_HOST", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE")


def _built_horovod_wheel() -> Path | None:
    done = subprocess.run([sys.executable, "-m", "pip", "cache", "list", "horovod",
                           "--format=abspath"], capture_output=True, text=True, timeout=60,
                          check=False)
    found = [Path(line) for line in done.stdout.split() if line.endswith(".whl")]
    return found[0] if done.returncode == 0 and found else None


@pytest.fixture(scope="module")
def checkout() -> Iterator[Path]:
    """This checkout's files (tracked and not ignored) in a tree the user owns."""
    if os.geteuid() != 0 or not shutil.which("runuser") or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to run as another user), runuser and /usr/bin/python3")
    top = Path(tempfile.mkdtemp(prefix="ringtrain-readme-"))
    try:
        top.chmod(0o755)
        src, home, wheels = top / "src", top / "home", top / "wheels"
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co",
                                 "--exclude-standard"], capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
        for name in filter(None, listed):
            source = REPO / name
            if source.is_file() and not source.is_symlink():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, src / name)
        home.mkdir()
        wheels.mkdir()
        built = _built_horovod_wheel()
        if built is not None:
            shutil.copy2(built, wheels / built.name)
        subprocess.run(["chown", "-R", f"{USER}:", str(src), str(home), str(wheels)],
                       check=True, timeout=120)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _make(top: Path, target: str, timeout: float, **extra: str) -> subprocess.CompletedProcess[str]:
    home = top / "home"
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8",
           "PIP_CACHE_DIR": str(home / "cache"), "USER": USER, "LOGNAME": USER}
    env.update({k: os.environ[k] for k in PASSED_ON if k in os.environ})
    env["PIP_FIND_LINKS"] = " ".join(filter(None, [str(top / "wheels"),
                                                   env.get("PIP_FIND_LINKS", "")]))
    env.update(extra)
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), "make", "-C", str(top / "src"),
                           target], capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_make_demo_then_make_test_as_a_user_who_is_not_root(checkout: Path) -> None:
    demo = _make(checkout, "demo", timeout=1500)
    said = demo.stdout + demo.stderr
    assert demo.returncode == 0, said[-6000:]
    assert "bootstrap: creating virtualenv .venv" in said, said[-3000:]
    assert "bootstrap: done: .venv is ready" in said, said[-3000:]
    assert "the simulated cluster needs root (network namespaces); using local slots" in said
    assert "demo: passed (accuracy >= " in said, said[-3000:]
    venv_python = checkout / "src" / ".venv" / "bin" / "python"
    assert os.path.realpath(venv_python).startswith("/usr/"), os.path.realpath(venv_python)
    assert (checkout / "src" / ".venv").stat().st_uid != 0

    test = _make(checkout, "test", timeout=900,
                 PYTEST_ADDOPTS="-q -p no:cacheprovider tests/unit/test_bootstrap_plan.py")
    said = test.stdout + test.stderr
    assert test.returncode == 0, said[-6000:]
    assert "bootstrap: environment up to date (.venv)" in said, said[-3000:]
    assert "Success: no issues found" in said, said[-3000:]  # mypy --strict, as the user
    assert " passed" in said and " failed" not in said, said[-3000:]
