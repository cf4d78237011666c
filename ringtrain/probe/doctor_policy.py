"""What the pre-flight does with each doctor finding: fail the launch, exclude the host, warn,
or ignore it. PURE.

``--on-bad-host`` takes the action for every problem (``fail`` or ``exclude``) and, repeated,
one action per reason code: ``--on-bad-host exclude --on-bad-host pcie-width=exclude
--on-bad-host xid=ignore``. A code's default follows its severity: fatal findings take the
general action, warnings warn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ringtrain.errors import UsageError
from ringtrain.hostfile.model import Host
from ringtrain.probe.doctor import BY_CODE, FATAL, Baseline, Finding, examine, fleet_of
from ringtrain.probe.probe_parse import ProbeResult
from ringtrain.probe.stack import stack_findings

Action = Literal["fail", "exclude", "warn", "ignore"]
ACTIONS: tuple[Action, ...] = ("fail", "exclude", "warn", "ignore")
GENERAL: tuple[str, ...] = ("fail", "exclude")


@dataclass(frozen=True, slots=True)
class BadHostPolicy:
    """``--on-bad-host`` parsed: the general action and the per-code ones."""

    general: Literal["fail", "exclude"] = "fail"
    per_code: tuple[tuple[str, Action], ...] = ()

    def action(self, code: str) -> Action:
        for c, a in self.per_code:
            if c == code:
                return a
        return self.general if BY_CODE[code].severity == FATAL else "warn"


def parse_on_bad_host(values: Iterable[str], where: str = "--on-bad-host") -> BadHostPolicy:
    """``["exclude", "pcie-width=warn"]`` -> BadHostPolicy; a clear UsageError otherwise."""
    general: Literal["fail", "exclude"] = "fail"
    per_code: dict[str, Action] = {}
    for raw in values:
        value = raw.strip()
        code, eq, action = value.partition("=")
        if not eq:
            if value not in GENERAL:
                raise UsageError(f"{where} {value!r} is not fail, exclude or CODE=ACTION",
                                 _hint())
            general = "exclude" if value == "exclude" else "fail"
            continue
        code, action = code.strip(), action.strip()
        if code not in BY_CODE:
            raise UsageError(f"{where} {value!r}: unknown reason code {code!r}", _hint())
        if action not in ACTIONS:
            raise UsageError(f"{where} {value!r}: action {action!r} is not one of "
                             f"{', '.join(ACTIONS)}", _hint())
        per_code[code] = action  # checked just above
    return BadHostPolicy(general, tuple(sorted(per_code.items())))


def _hint() -> str:
    return ("use --on-bad-host fail|exclude, and CODE=fail|exclude|warn|ignore per reason "
            f"code; codes: {', '.join(BY_CODE)} (`ringtrain check --doctor --help` explains "
            "each)")


@dataclass(frozen=True, slots=True)
class Judged:
    finding: Finding
    action: Action
    said: bool = False  # already among the host's problems or warnings in its own words


def judge(hosts: Sequence[Host], results: Mapping[str, ProbeResult], policy: BadHostPolicy,
          iface: Mapping[str, str], *, run_id: str | None = None,
          baselines: Mapping[str, Baseline] | None = None, gpus: bool = True
          ) -> dict[str, tuple[Judged, ...]]:
    """Each host's findings with the action the policy takes (ignored ones left out)."""
    health = {h.name: r.health for h in hosts
              if (r := results.get(h.name)) is not None and r.reachable and r.health is not None}
    fleet = fleet_of(health, iface)
    out: dict[str, tuple[Judged, ...]] = {}
    for host in hosts:
        h = health.get(host.name)
        if h is None:
            continue
        found = examine(h, host.slots, iface=iface.get(host.name), run_id=run_id,
                        baseline=(baselines or {}).get(host.name), fleet=fleet, gpus=gpus)
        used = min(host.slots, len(results[host.name].gpu.healthy)) if gpus else 0
        found += stack_findings(results[host.name].versions, used)
        judged = tuple(Judged(f, a) for f in found if (a := policy.action(f.code)) != "ignore")
        if judged:
            out[host.name] = judged
    return out
