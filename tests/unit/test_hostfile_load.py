"""load_inventory / resolve_hosts: format detection, file errors and discovery scripts."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from ringtrain.errors import InventoryError, UsageError
from ringtrain.hostfile import detect_format, load_inventory, resolve_hosts


def _write(path, text, *, executable=False):
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("h", "gpu01 slots=4\ngpu02 slots=4\n", "openmpi"),
        ("h", "gpu01\ngpu02\n", "openmpi"),
        ("h", "# c\ngpu01:4\ngpu02:2\n", "mpich"),
        ("h", "[fd00::1]:4\n", "mpich"),
        ("h", "gpu01:4,gpu02:4\n", "horovod"),
        ("h", "gpu[01-04]:4\n", "nodelist"),
        ("h", "gpu01,gpu02\ncpu01\n", "nodelist"),
        ("h", "a\na\nb\n", "pbs"),
        ("h", "groups:\n  r1: {hosts: [a]}\n", "yaml"),
        ("h", "---\n{hosts: [a]}\n", "yaml"),
        ("h", "[groups.r1]\nhosts = ['a']\n", "toml"),
        ("h", "[[hosts]]\nname = 'a'\n", "toml"),
        ("h.yml", "anything", "yaml"),
        ("h.JSON", "{}", "yaml"),
        ("h.toml", "anything", "toml"),
    ],
)
def test_detect_format(name, text, fmt):
    assert detect_format(name, text) == fmt


def test_load_detects_and_forced_format_wins(tmp_path):
    path = _write(tmp_path / "hosts", "a\na\nb\n")
    assert load_inventory(path).format == "pbs"
    with pytest.raises(InventoryError, match="listed twice") as info:
        load_inventory(path, "mpich")
    assert (info.value.source, info.value.line) == (path, 2)
    assert load_inventory(_write(tmp_path / "one", "gpu01:4\n"), "horovod").format == "horovod"


def test_load_file_errors(tmp_path):
    with pytest.raises(InventoryError, match="does not exist") as info:
        load_inventory(str(tmp_path / "missing"))
    assert "-H" in info.value.hint
    with pytest.raises(InventoryError, match="is a directory"):
        load_inventory(str(tmp_path))
    with pytest.raises(InventoryError, match="unknown host file format 'xml'"):
        load_inventory(_write(tmp_path / "h", "a\n"), "xml")
    binary = tmp_path / "bin"
    binary.write_bytes(b"gpu01\ngpu\xff02\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(str(binary))
    assert (info.value.line, info.value.column) == (2, 4)
    assert "UTF-8" in info.value.message


def test_load_accepts_a_byte_order_mark(tmp_path):
    path = tmp_path / "h"
    path.write_bytes(b"\xef\xbb\xbfgpu01 slots=2\n")
    assert load_inventory(str(path)).names == ("gpu01",)


def test_discovery_script(tmp_path):
    script = _write(tmp_path / "find", "#!/bin/sh\necho gpu01:4\necho '[fd00::2]:2'\n",
                    executable=True)
    inv = load_inventory(script)
    assert [(h.name, h.slots) for h in inv.hosts] == [("gpu01", 4), ("fd00::2", 2)]
    assert inv.format == "script" and inv.source == f"{script} (output)"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("echo boom >&2; exit 3", ["exited 3: boom"]),
        ("kill -9 $$", ["killed by signal 9"]),
        ("exit 0", ["no hosts found"]),
        ("echo 'gpu01:4'; echo 'gpu 02:4'", ["unexpected '02:4'"]),
        ("printf 'gpu\\377\\n'", ["not UTF-8"]),
    ],
)
def test_discovery_script_failures(tmp_path, body, words):
    script = _write(tmp_path / "find", f"#!/bin/sh\n{body}\n", executable=True)
    with pytest.raises(InventoryError) as info:
        load_inventory(script)
    for word in words:
        assert word in info.value.message
    assert info.value.source.startswith(script)
    assert info.value.hint


def test_discovery_script_timeout_kills_its_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = _write(
        tmp_path / "slow", f"#!/bin/sh\nsleep 30 &\necho $! > {pidfile}\nwait\n", executable=True
    )
    started = time.monotonic()
    with pytest.raises(InventoryError, match=r"did not finish within 0.5 s") as info:
        load_inventory(script, discovery_timeout=0.5)
    assert time.monotonic() - started < 5
    assert "--discovery-timeout" in info.value.hint
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_executable_without_shebang_is_read_as_a_host_file(tmp_path):
    path = _write(tmp_path / "hosts", "gpu01 slots=2\n", executable=True)
    assert load_inventory(path).format == "openmpi"


def test_forced_script_that_cannot_run(tmp_path):
    path = _write(tmp_path / "hosts", "gpu01 slots=2\n")
    with pytest.raises(InventoryError, match="cannot run discovery script") as info:
        load_inventory(path, "script")
    assert "chmod +x" in info.value.hint


def test_resolve_hosts(tmp_path):
    assert resolve_hosts(None, None, None) is None
    assert resolve_hosts(None, "a:2,b:2", None).names == ("a", "b")
    assert resolve_hosts(None, "gpu[1-2]:2 cpu1", "nodelist").names == ("gpu1", "gpu2", "cpu1")
    path = _write(tmp_path / "h.yaml", "hosts: [a]\n")
    assert resolve_hosts(path, None, None).format == "yaml"
    with pytest.raises(UsageError, match="both"):
        resolve_hosts(path, "a:1", None)
    with pytest.raises(UsageError, match="not --hosts-format yaml"):
        resolve_hosts(None, "a:1", "yaml")


def test_no_traceback_for_unreadable_file(tmp_path):
    """A permission error for ordinary users; as root (CI) a file that no one can read:
    /proc/self/mem is a regular file whose read at offset 0 fails with EIO."""
    if os.geteuid() == 0:
        path = Path("/proc/self/mem")
    else:
        path = tmp_path / "h"
        path.write_text("a\n")
        path.chmod(0)
    with pytest.raises(InventoryError, match="cannot read host file"):
        load_inventory(str(path))


def test_a_discovery_script_that_prints_without_end_is_stopped_at_the_limit(tmp_path):
    """Issue 23: the output was buffered whole before the 1 MiB limit was checked; a script
    printing forever filled the launcher's memory until the timeout."""
    script = _write(tmp_path / "flood", "#!/bin/sh\nexec yes gpu01:1\n", executable=True)
    started = time.monotonic()
    with pytest.raises(InventoryError, match="printed more than 1048576 bytes") as info:
        load_inventory(script, discovery_timeout=20)
    assert time.monotonic() - started < 10  # stopped at the limit, not at the timeout
    assert "one host:slots line" in info.value.hint
