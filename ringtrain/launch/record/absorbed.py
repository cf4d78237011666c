"""A rank lost under ``--elastic`` that Horovod absorbed, as the ledger keeps it. PURE."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringtrain.launch.record.snapshot import Restored


@dataclass(frozen=True, slots=True)
class Absorbed:
    """A rank lost under --elastic: when, and when the job was training again after it."""

    rank: int
    host: str
    why: str
    at: float  # seconds into the attempt
    training_again: float | None = None  # ditto
    reset: float | None = None  # the first rank began its reset (ringtrain.keras), ditto
    formed: float | None = None  # the first rank's hvd.init returned after it (a new ring)
    restored: float | None = None  # rank 0 restored the state after it, ditto
    restored_from: str | None = None  # "rank 0's memory commit (epoch 3 step 10, 0.22 MB)"

    @property
    def silent(self) -> bool:
        """Lost by silence (its host stopped or cut off), not by its process ending."""
        return self.why.startswith("silent")

    @property
    def ttta_s(self) -> float | None:
        return None if self.training_again is None else self.training_again - self.at

    def stages(self) -> tuple[tuple[str, float | None], ...]:
        """Each step back as seconds after the loss (the ledger's elastic row)."""
        def since(t: float | None) -> float | None:
            return None if t is None else t - self.at
        return (("reset", since(self.reset)), ("ring formed", since(self.formed)),
                ("restored", since(self.restored)),
                ("training again", since(self.training_again)))

    def describe(self) -> str:
        steps = ", ".join(f"{name} {s:.1f} s" for name, s in self.stages() if s is not None)
        back = f"; {steps}" if steps else "; no training progress reported after it"
        where = f"; state from {self.restored_from}" if self.restored_from else ""
        return f"rank {self.rank} on {self.host} {self.why}{back}{where}"

    def to_json(self) -> dict[str, Any]:
        ttta = self.ttta_s
        return {"rank": self.rank, "host": self.host, "why": self.why, "at_s": round(self.at, 3),
                "ttta_s": None if ttta is None else round(ttta, 3),
                "stages_s": {k: None if v is None else round(v, 3) for k, v in self.stages()},
                "restored_from": self.restored_from}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Absorbed:
        at = float(d["at_s"])
        stages = d.get("stages_s") or {}

        def back(key: str, value: Any) -> float | None:
            return None if value is None else at + float(value)

        return cls(int(d["rank"]), str(d["host"]), str(d["why"]), at,
                   back("ttta", d.get("ttta_s")), back("reset", stages.get("reset")),
                   back("ring formed", stages.get("ring formed")),
                   back("restored", stages.get("restored")), d.get("restored_from"))


def restored_text(r: Restored) -> str:
    """Where a memory restore took the state from. Pure."""
    at = (f"epoch {r.epoch} step {r.step}" if r.epoch is not None and r.step is not None
          else "its last commit")
    size = f", {r.nbytes / 1e6:.2f} MB" if r.nbytes is not None else ""
    world = f"; world of {r.size}" if r.size is not None else ""
    who = f"rank {r.source}'s" if r.source is not None else "a rank's"
    return f"{who} memory commit ({at}{size}{world})"
