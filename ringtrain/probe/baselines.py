"""What the doctor's last clean check of each host saw, kept between runs, so that Xid lines,
PCIe replays and ``link_downed`` counts are judged "since the last check".

The file is the user's own: ``$XDG_STATE_HOME/ringtrain/doctor.json`` (``~/.local/state/...``),
in a directory created 0700, written through a new file (``O_EXCL | O_NOFOLLOW``) renamed into
place, read without following a link. What it holds is still checked value by value: a
malformed entry is dropped, never trusted.

Only hosts that came out of a check with no fatal finding are recorded (``recordable``): an Xid
that excluded a host stays fatal on the next check too, until a clean check (after a reboot: a
new boot id, whose kernel log no longer holds the line) moves the baseline on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringtrain.probe.doctor import Baseline, baseline_of
from ringtrain.probe.doctor_parse import HostHealth

log = logging.getLogger(__name__)

MAX_HOSTS = 100_000
_KEY_RE = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


def default_path(environ: Mapping[str, str] = os.environ) -> Path:
    base = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")) / ".local/state")
    return Path(base).expanduser() / "ringtrain" / "doctor.json"


def load(path: Path) -> dict[str, Baseline]:
    """The baselines in ``path``; {} when there is none or it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as fh:
            data = json.loads(fh.read(64 * 1024 * 1024))
    except (OSError, ValueError) as err:
        log.info("doctor baselines %s not read: %s", path, err)
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for host, raw in list(data.items())[:MAX_HOSTS]:
        b = _baseline(raw) if isinstance(host, str) and _KEY_RE.match(host) else None
        if b is not None:
            out[host] = b
    return out


def _baseline(raw: Any) -> Baseline | None:
    if not isinstance(raw, dict):
        return None
    boot, uptime = raw.get("boot_id"), raw.get("uptime_s")
    if not (isinstance(boot, str) and _KEY_RE.match(boot)) or isinstance(uptime, bool) or (
            not isinstance(uptime, int | float)):
        return None
    return Baseline(boot, float(uptime), _counts(raw.get("replays")),
                    _counts(raw.get("link_downed")))


def _counts(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and _KEY_RE.match(k)
            and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63}


def save(path: Path, updates: Mapping[str, Baseline]) -> None:
    """Merge ``updates`` into ``path`` (atomic; a failure is logged, never raised: a doctor
    without memory still works, from boot)."""
    if not updates:
        return
    merged = {**load(path), **updates}
    body = json.dumps({h: {"boot_id": b.boot_id, "uptime_s": b.uptime_s,
                           "replays": dict(b.replays), "link_downed": dict(b.link_downed)}
                       for h, b in merged.items()}, sort_keys=True).encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except OSError as err:
        log.info("doctor baselines %s not written: %s", path, err)
        with contextlib.suppress(OSError):
            tmp.unlink()


def recordable(hosts: Mapping[str, tuple[bool, HostHealth | None]]) -> dict[str, Baseline]:
    """The baselines to keep: ``hosts`` maps each host to (no fatal finding, its health)."""
    return {h: baseline_of(health) for h, (clean, health) in hosts.items()
            if clean and health is not None and health.boot_id and health.uptime_s is not None}
