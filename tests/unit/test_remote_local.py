"""LocalRemote runs the real probe script here (sh, uname, ip, mpirun), fake nvidia-smi on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ringtrain.hostfile.model import Host, Inventory
from ringtrain.probe.hostprobe import probe
from ringtrain.probe.probe_parse import GpuStatus
from ringtrain.remote import LocalRemote

LOCAL = Inventory((Host("localhost", 2),))
ROWS = ("0, NVIDIA A100-SXM4-80GB, GPU-00000000-1111-2222-3333-444455556666, 81920, 4, 0, "
        "535.129.03\n1, NVIDIA A100-SXM4-80GB, GPU-00000001-1111-2222-3333-444455556666, 81920, "
        "4, 0, 535.129.03")


def fake_tool_env(tmp_path: Path, body: str) -> dict[str, str]:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}


def test_real_script_with_fake_gpus(tmp_path: Path) -> None:
    env = fake_tool_env(tmp_path, f"cat <<'EOF'\n{ROWS}\nEOF\n")
    report = probe(LOCAL, LocalRemote(env), python=sys.executable)
    r = report.result("localhost")
    assert r.error is None and r.gpu.status is GpuStatus.OK
    assert [g.index for g in r.gpus] == [0, 1] and r.driver_version == "535.129.03"
    assert r.hostname == os.uname().nodename
    assert r.versions.python == ".".join(map(str, sys.version_info[:3]))
    assert any(i.name == "lo" for i in r.interfaces)


def test_real_script_with_failing_driver(tmp_path: Path) -> None:
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.")
    env = fake_tool_env(tmp_path, f"echo \"{msg}\"\nexit 9\n")
    r = probe(LOCAL, LocalRemote(env), python=sys.executable).result("localhost")
    assert r.gpu.status is GpuStatus.FAILED and r.gpu.message is not None
    assert r.gpu.message.endswith(msg) and "exit 9" in r.gpu.message


def test_real_script_without_nvidia_smi_or_python(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = probe(LOCAL, LocalRemote(env), python=str(tmp_path / "no-python")).result("localhost")
    assert r.gpu.status is GpuStatus.NOT_INSTALLED
    assert r.versions.error is not None and r.versions.error.startswith("python not found at")


def test_local_runner_errors() -> None:
    local = LocalRemote()
    r = local.run_one("localhost", ["sleep", "5"], timeout=0.2)
    assert r.error == "timed out after 0.2 s" and r.exit_code is None
    r = local.run_one("localhost", ["/nonexistent/tool"], timeout=5)
    assert r.exit_code == 127 and r.error == "/nonexistent/tool: command not found"
    r = local.run_one("localhost", ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=5)
    assert (r.exit_code, r.stdout, r.stderr, r.error) == (3, "out\n", "err\n", None)


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1"])
def test_ssh_remote_runs_local_hosts_without_ssh(name: str) -> None:
    from ringtrain.remote.ssh import SshRemote

    remote = SshRemote(Path(os.devnull))
    r = remote.run([Host(name, 1)], ["echo", "hi"], 5)[name]
    assert r.ok and r.stdout == "hi\n"
