"""The indexed ssh_config lookup gives exactly paramiko's answer for every host, whatever the
mix of plain-name stanzas, wildcards, negations, Match blocks and repeated names (its speed is
measured by bench/launcher/scale.py, not tested)."""

from __future__ import annotations

import random

import paramiko

from ringtrain.remote.ssh import IndexedSshConfig

NAMES = [f"gpu{i:02d}" for i in range(12)] + ["login", "gpu01.cluster", "10.0.0.5"]


def _random_config(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(1, 14)):
        kind = rng.random()
        if kind < 0.5:
            patterns = " ".join(rng.sample(NAMES, rng.randint(1, 3)))
        elif kind < 0.7:
            patterns = rng.choice(["gpu*", "gpu0?", "*", "*.cluster", "gpu1[01]"])
        elif kind < 0.85:
            patterns = f"gpu* !{rng.choice(NAMES)}"
        else:
            lines.append(f"Match host {rng.choice(['gpu0*', 'login'])}")
            lines.append(f"  User match{i}")
            continue
        lines.append(f"Host {patterns}")
        lines.append(f"  Port {2200 + i}")
        if rng.random() < 0.5:
            lines.append(f"  User u{i}")
        if rng.random() < 0.3:
            lines.append(f"  IdentityFile ~/.ssh/id_{i}")
        if rng.random() < 0.3:
            lines.append(f"  HostName h{i}.example")
    return "\n".join(lines) + "\n"


def test_indexed_lookups_equal_paramikos_on_random_configs() -> None:
    rng = random.Random(11)
    for _ in range(300):
        text = _random_config(rng)
        config = paramiko.SSHConfig.from_text(text)
        indexed = IndexedSshConfig(config)
        for name in [*NAMES, "other"]:
            assert indexed.lookup(name) == config.lookup(name), (text, name)


def test_canonicalizing_configs_use_the_whole_config() -> None:
    text = "Host gpu01\n  Port 2201\nHost *\n  CanonicalizeHostname yes\n  CanonicalDomains x\n"
    config = paramiko.SSHConfig.from_text(text)
    indexed = IndexedSshConfig(config)
    assert indexed.lookup("gpu01") == config.lookup("gpu01")
