"""What the GPU re-check before a restart found, as the ledger keeps it. PURE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Recheck:
    """What the re-check before a restart found: when it ran (wall clock), the hosts it had to
    wait for and how long each took to free its GPUs, and the hosts it left out, with why."""

    started: float
    finished: float
    hosts: int = 0
    waited: tuple[tuple[str, float], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    unknown: tuple[tuple[str, str], ...] = ()  # hosts that could not be asked, with why

    def describe(self) -> str:
        took = f"{self.finished - self.started:.1f} s"
        if not self.waited and not self.left_out and not self.unknown:
            return f"{self.hosts} host(s) re-checked, GPUs free ({took})"
        parts = [f"{h} freed its GPUs after {s:.1f} s" for h, s in self.waited]
        parts += [f"{h} left out for a cooldown: {why}" for h, why in self.left_out]
        parts += [f"could not ask {h} ({why}): the pre-flight judges it"
                  for h, why in self.unknown]
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"started": round(self.started, 3), "finished": round(self.finished, 3),
                "hosts": self.hosts, "waited_s": {h: round(s, 3) for h, s in self.waited},
                "left_out": dict(self.left_out), "unknown": dict(self.unknown)}

    @classmethod
    def from_json(cls, d: Any) -> Recheck | None:
        if not isinstance(d, dict):
            return None
        return cls(float(d["started"]), float(d["finished"]), int(d.get("hosts") or 0),
                   tuple((str(h), float(s)) for h, s in (d.get("waited_s") or {}).items()),
                   tuple((str(h), str(w)) for h, w in (d.get("left_out") or {}).items()),
                   tuple((str(h), str(w)) for h, w in (d.get("unknown") or {}).items()))
