"""The README's two set-up commands, run by a user who is not root (issue 27, item 5).

A copy of this checkout's tracked files, owned by ``nobody``, with a home under /tmp and the
system's Python on PATH (the tests' own interpreter lives in root's 0700 home): ``make demo``
must bootstrap its own venv and train on local slots to the target accuracy, and ``make test``
must then find that venv up to date and run ruff, mypy and pytest. The suite is not run a
second time from inside itself: ``make test`` gets one unit test file through
``PYTEST_ADDOPTS``.

Horovod is compiled from source by the root bootstrap this suite was started by; it keeps
that wheel in root's ~/.cache/ringtrain/wheels, and the user's pip is pointed at a copy of it
(a user's own bootstrap keeps theirs the same way for their second venv). Without it the
user's bootstrap compiles Horovod itself, which is slower but tests the same thing.
TensorFlow comes from the index, as a user's would.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]
USER = "nobody"
# what the user's pip and bootstrap need from this environment (never argv: given as env)
PASSED_ON = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT",
             "PIP_DEFAULT_TIMEOUT", "PIP_TRUSTED_HOST", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE", "RINGTRAIN_TF")


def _built_horovod_wheels() -> list[Path]:
    """The Horovod wheels root's bootstrap built (ringtrain's, patched: scripts/bootstrap.sh
    keeps them in ~/.cache/ringtrain/wheels/<flavour>, or $RINGTRAIN_WHEELS)."""
    base = os.environ.get("RINGTRAIN_WHEELS") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ringtrain" / "wheels")
    return sorted(Path(base, "cpu").glob("horovod-*.whl"))


@pytest.fixture(scope="module")
def checkout() -> Iterator[Path]:
    """This checkout's tracked files in a tree the user owns."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to run as another user) and /usr/bin/python3")
    top = Path(tempfile.mkdtemp(prefix="ringtrain-readme-", dir="/tmp"))
    try:
        top.chmod(0o711)
        src, home, wheels = top / "src", top / "home", top / "wheels"
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"],
                                capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
        for name in filter(None, listed):
            source = REPO / name
            if source.is_file() and not source.is_symlink():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, src / name)
        home.mkdir()
        wheels.mkdir()
        for built in _built_horovod_wheels():
            shutil.copy2(built, wheels / built.name)
        subprocess.run(["chown", "-R", f"{USER}:", str(src), str(home), str(wheels)],
                       check=True, timeout=120)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _make(top: Path, target: str, timeout: float, **extra: str) -> tuple[int, str]:
    """``make -C src target`` as the user, in a session of its own: on a timeout the whole
    process group (make, pip, the launcher) is ended, not just make."""
    home, user = top / "home", pwd.getpwnam(USER)
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8",
           "PIP_CACHE_DIR": str(home / "cache"), "USER": USER, "LOGNAME": USER}
    env.update({k: os.environ[k] for k in PASSED_ON if k in os.environ})
    env["PIP_FIND_LINKS"] = " ".join(filter(None, [str(top / "wheels"),
                                                   env.get("PIP_FIND_LINKS", "")]))
    env.update(extra)
    proc = subprocess.Popen(["make", "-C", str(top / "src"), target], cwd=top / "src", env=env,
                            user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"make {target} as {USER} took over {timeout:.0f} s:\n{out[-4000:]}")
    return proc.returncode, out


@pytest.mark.timeout(2700)  # compiling Horovod, where root's wheel is not in its cache
def test_make_demo_then_make_test_as_a_user_who_is_not_root(checkout: Path) -> None:
    rc, said = _make(checkout, "demo", timeout=1500)
    assert rc == 0, said[-6000:]
    assert "bootstrap: creating virtualenv .venv" in said, said[-3000:]
    assert "bootstrap: done: .venv is ready" in said, said[-3000:]
    assert "the simulated cluster needs root (network namespaces); using local slots" in said
    assert "demo: passed (accuracy >= " in said, said[-3000:]
    venv_python = checkout / "src" / ".venv" / "bin" / "python"
    assert os.path.realpath(venv_python).startswith("/usr/"), os.path.realpath(venv_python)
    assert (checkout / "src" / ".venv").stat().st_uid == pwd.getpwnam(USER).pw_uid

    rc, said = _make(checkout, "test", timeout=900,
                     PYTEST_ADDOPTS="-q -p no:cacheprovider tests/unit/test_bootstrap_plan.py")
    assert rc == 0, said[-6000:]
    assert "bootstrap: environment up to date (.venv)" in said, said[-3000:]
    assert "Success: no issues found" in said, said[-3000:]  # mypy --strict, as the user
    assert " passed" in said and " failed" not in said, said[-3000:]
