"""The indexed known_hosts store answers exactly what a scan of every entry answers, for any
mix of plain, bracketed, hashed, wildcard, negated, revoked and cert-authority lines, in file
order, including keys appended while it is in use (its speed is measured by
bench/launcher/scale.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
from pathlib import Path

from ringtrain.remote.keys import KnownHosts, KnownHostsEntry, parse_known_hosts

NAMES = ["gpu01", "GPU02", "gpu03", "10.0.0.5", "[gpu01]:2222", "[10.0.0.5]:2222", "login"]


def _hashed(name: str, rng: random.Random) -> str:
    salt = rng.randbytes(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


def _random_file(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(0, 25)):
        kind = rng.random()
        if kind < 0.5:
            patterns = ",".join(rng.sample(NAMES, rng.randint(1, 3)))
        elif kind < 0.65:
            patterns = _hashed(rng.choice(NAMES).lower(), rng)
        elif kind < 0.8:
            patterns = rng.choice(["gpu*", "gpu0?", "*", "[gpu0?]:2222"])
        else:
            patterns = f"gpu*,!{rng.choice(NAMES)}"
        marker = rng.choice(["", "", "", "", "@revoked ", "@cert-authority "])
        lines.append(f"{marker}{patterns} ecdsa-sha2-nistp256 key{i % 7}")
    return "\n".join(lines) + "\n"


def _scan(entries: list[KnownHostsEntry], names: tuple[str, ...]) -> tuple[KnownHostsEntry, ...]:
    return tuple(e for e in entries if e.marker == "" and any(e.matches(n) for n in names))


def test_index_answers_like_a_scan(tmp_path: Path) -> None:
    rng = random.Random(14)
    for case in range(300):
        kh = tmp_path / f"known_hosts{case}"
        kh.write_text(_random_file(rng))
        store = KnownHosts((kh,), kh)
        entries = list(parse_known_hosts(kh.read_text()))
        for _ in range(3):  # appended entries are indexed too
            names = tuple(rng.sample(NAMES, rng.randint(1, 2)))
            key = base64.b64encode(f"new{case}".encode()).decode()
            store.add(names, "ssh-ed25519", key)
            entries.append(KnownHostsEntry(names, "ssh-ed25519", key))
        for name in [*NAMES, "GPU01", "gpu04", "nohost"]:
            for names in ((name,), (name, rng.choice(NAMES))):
                assert store.keys_for(names) == _scan(entries, names), (kh.read_text(), names)
        for key in {e.key_b64 for e in entries} | {"absent"}:
            revoked = any(e.marker == "@revoked" and e.key_b64 == key for e in entries)
            assert store.is_revoked(key) == revoked
