"""``ringtrain hosts``: a correct allocation for every example in hosts/, JSON for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ringtrain.cli.hosts_cmd import command
from ringtrain.errors import AllocationError, UsageError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "hosts").iterdir() if p.suffix != ".md")


def _run(*args: str):
    return CliRunner().invoke(command, list(args), catch_exceptions=True)


@pytest.mark.parametrize("name", EXAMPLES)
def test_json_allocation_for_every_example(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _run(f"hosts/{name}", "-np", "6", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    inventory, alloc = data["inventory"], data["allocation"]
    assert alloc["np"] == 6
    assert [r["rank"] for r in alloc["ranks"]] == list(range(6))
    # ranks fill the inventory's hosts in order, each up to its slots
    left, expected = 6, []
    for host in inventory["hosts"]:
        take = min(host["slots"], left)
        if take:
            expected.append((host["name"], take))
        left -= take
    assert [(h["name"], h["slots"]) for h in alloc["hosts"]] == expected
    assert alloc["horovod_hosts"] == ",".join(
        f"[{n}]:{s}" if ":" in n else f"{n}:{s}" for n, s in expected
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_table_for_every_example(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _run(f"hosts/{name}", "-np", "4")
    assert result.exit_code == 0, result.output
    assert f"hosts/{name}" in result.output
    assert "allocation: 4 ranks on 1 host, in ring order" in result.output
    assert "horovodrun -np 4 -H " in result.output


def test_policy_options(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _run(
        "hosts/cluster.yaml", "--ring-label", "rack", "--exclude", "gpu0[4]", "--slots",
        "gpu03=2", "--include", "gpu*,10.0.0.9", "--min-hosts", "2", "--json",
    )
    assert result.exit_code == 0, result.output
    alloc = json.loads(result.output)["allocation"]
    assert [(h["name"], h["slots"]) for h in alloc["hosts"]] == [
        ("gpu01", 4), ("gpu02", 4), ("gpu03", 2), ("10.0.0.9", 2), ("gpu05", 4),
    ]
    assert alloc["ring_crossings"] == 2
    assert {"host": "gpu04", "reason": "excluded by --exclude (4 slots)"} in alloc["dropped"]


def test_inline_hosts_and_render():
    result = _run("-H", "gpu[01-03]:4", "-np", "10", "--render", "openmpi")
    assert result.output == "gpu01 slots=4\ngpu02 slots=4\ngpu03 slots=2\n"
    result = _run("-H", "gpu[01-03]:4", "--render", "nodelist")
    assert result.output == "gpu[01-03]:4\n"


def test_render_yaml_keeps_groups_of_used_hosts(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _run("hosts/cluster.yaml", "-np", "4", "--render", "yaml")
    assert "rack1:" in result.output and "rack2" not in result.output


def test_errors_propagate_as_ringtrain_errors():
    assert isinstance(_run("-H", "a:2", "-np", "3").exception, AllocationError)
    assert isinstance(_run().exception, UsageError)
    assert isinstance(_run("x", "--hosts", "y").exception, UsageError)
    assert _run("-H", "a:1", "--slots", "a").exit_code == 2  # click's own usage error


def test_group_prints_error_and_fix_without_traceback(tmp_path):
    cli = pytest.importorskip("ringtrain.cli").cli
    bad = tmp_path / "hosts.txt"
    bad.write_text("gpu01 slots=4\ngpu02 slots=four\n")
    result = CliRunner().invoke(cli, ["hosts", str(bad)])
    assert result.exit_code == 2
    assert f"error: {bad}:2:7: slots 'four' is not a whole number" in result.output
    assert "fix: " in result.output
    assert "Traceback" not in result.output
