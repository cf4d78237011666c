"""Every example in hosts/ parses, renders to the stored golden text, and reads back.

Regenerate after an intended change: ``RINGTRAIN_UPDATE_GOLDEN=1 pytest tests/unit -k golden``
and review the diff of tests/unit/golden/hostfile/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ringtrain.hostfile import (
    AllocationPolicy,
    allocate,
    load_inventory,
    parse_inventory_text,
    render_inventory,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "hosts").iterdir() if p.suffix != ".md")
GOLDEN = Path(__file__).parent / "golden" / "hostfile"
RENDERED = ("openmpi", "mpich", "horovod", "nodelist", "pbs", "yaml", "toml", "json")
EXPECTED_FORMATS = {
    "cluster.toml": "toml",
    "cluster.yaml": "yaml",
    "discover.sh": "script",
    "horovod.hosts": "horovod",
    "mpich.machinefile": "mpich",
    "openmpi.hostfile": "openmpi",
    "pbs.nodefile": "pbs",
    "slurm.nodelist": "nodelist",
}


def test_every_format_has_an_example():
    assert set(EXAMPLES) == set(EXPECTED_FORMATS)


def _golden_text(name: str) -> str:
    inventory = load_inventory(f"hosts/{name}")
    assert inventory.format == EXPECTED_FORMATS[name]
    parts = [f"# golden output for hosts/{name}; regenerate with RINGTRAIN_UPDATE_GOLDEN=1\n"]
    for fmt in RENDERED:
        parts.append(f"\n== render {fmt}\n{render_inventory(inventory, fmt)}")
    label = "rack" if any(h.label("rack") for h in inventory.hosts) else None
    for np in (None, max(1, inventory.total_slots // 2)):
        alloc = allocate(inventory, np, policy=AllocationPolicy(ring_label=label))
        crossings = alloc.ring_crossings
        parts.append(f"\n== allocate np={np} ring_label={label}: {crossings} crossings\n")
        parts.extend(
            f"rank {r.rank:>3} local {r.local_rank}/{r.local_size} "
            f"cross {r.cross_rank}/{r.cross_size} {r.host}\n"
            for r in alloc.ranks
        )
        parts.extend(f"dropped {host}: {why}\n" for host, why in alloc.dropped)
    return "".join(parts)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_golden(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    actual = _golden_text(name)
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("RINGTRAIN_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual)
    assert golden.exists(), f"no golden file {golden}; run with RINGTRAIN_UPDATE_GOLDEN=1"
    assert actual == golden.read_text()


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("fmt", RENDERED[:-1])
def test_example_renders_read_back(name, fmt, monkeypatch):
    monkeypatch.chdir(ROOT)
    inventory = load_inventory(f"hosts/{name}")
    again = parse_inventory_text(render_inventory(inventory, fmt), fmt, "again")
    assert [(h.name, h.slots) for h in again.hosts] == [(h.name, h.slots) for h in inventory.hosts]
    if fmt in ("yaml", "toml"):
        assert again.hosts == inventory.hosts and again.groups == inventory.groups


def test_readme_quotes_every_example_verbatim():
    readme = (ROOT / "hosts" / "README.md").read_text()
    for name in EXAMPLES:
        assert f"`hosts/{name}`:\n\n```" in readme
        assert (ROOT / "hosts" / name).read_text() in readme
