"""Before a restart, the failed attempt's hosts are re-checked: their GPUs must be free again.

A rank that has just died may still hold its GPU memory while the driver tears its CUDA context
down (seconds on a real GPU; a process stuck in the kernel holds it until it ends). A new rank
placed there runs out of memory, or shares the GPU with a ghost. NVIDIA's resiliency extension
waits for that memory to be freed before it restarts; so does ringtrain: it asks every host of
the failed attempt at once (``nvidia-smi`` over the Remote seam) and, while some GPU that was
free before the attempt is busy, asks again (after 0.1 s, then more slowly, up to every half
second), up to ``--recheck-timeout``. A
host still busy then sits out the restart's cooldown, and the report says why.

Not judged here: hosts whose GPUs were already busy before the attempt (another job's, warned
about then), and hosts that cannot be asked (the pre-flight that follows judges those). Whether
the failed attempt's processes are gone is the teardown's answer (outcome.decide leaves out a
host whose teardown was not clean).

``judge`` is pure: one look at the hosts in, who is free, who is still awaited and who is left
out. ``recheck`` is the thin loop around it; ``Recheck`` is its value, kept on the failed
attempt's JobResult (result.json, the recovery ledger).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ringtrain.hostfile import Host
from ringtrain.launch.record.gpurecheck import Recheck
from ringtrain.probe.hostprobe import NVIDIA_SMI_QUERY, NVIDIA_SMI_TIMEOUT_S
from ringtrain.probe.probe_parse import parse_nvidia_smi
from ringtrain.probe.verdict import PreflightPolicy, busy_gpus
from ringtrain.remote import Remote

# The pauses between looks: short first, since a killed rank's GPU memory is freed within
# 0.16-0.25 s of its SIGKILL (an H100, 1 to 70 GiB held; `.devcap` check, 2026-11-27), so a
# first pause of 0.5 s made every re-check cost 0.56 s. Then every half second.
INTERVALS_S = (0.1, 0.1, 0.2, 0.2)
INTERVAL_S = 0.5
# the probe's PATH (hostprobe.PROBE_SCRIPT): nvidia-smi is often outside a bare ssh's
NVIDIA_SMI_ARGV = ("sh", "-c", 'PATH="$PATH:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" '
                   'exec nvidia-smi "$@"', "nvidia-smi", NVIDIA_SMI_QUERY,
                   "--format=csv,noheader,nounits")
DEFAULT_POLICY = PreflightPolicy()  # the pre-flight's busy thresholds


@dataclass(frozen=True, slots=True)
class Judgement:
    freed: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()  # (host, why)


def judge(busy: Mapping[str, Sequence[str]], elapsed_s: float, timeout_s: float) -> Judgement:
    """One look: ``busy`` maps each host asked to its busy-GPU notes (none: free). Pure."""
    freed = tuple(h for h, notes in busy.items() if not notes)
    still = {h: notes for h, notes in busy.items() if notes}
    if elapsed_s < timeout_s:
        return Judgement(freed, tuple(still))
    return Judgement(freed, (), tuple(
        (h, f"{notes[0]} {elapsed_s:.0f} s after the teardown")
        for h, notes in still.items()))


def look(
    remote: Remote, hosts: Sequence[Host], policy: PreflightPolicy
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Each host's busy-GPU notes (none: free, or no nvidia-smi: a CPU host), all hosts at
    once, and the hosts that could not be asked, with why (the pre-flight judges those)."""
    answers = remote.run(hosts, NVIDIA_SMI_ARGV, NVIDIA_SMI_TIMEOUT_S)
    out: dict[str, tuple[str, ...]] = {}
    unknown: dict[str, str] = {}
    for host in hosts:
        answer = answers.get(host.name)
        if answer is None or answer.error is not None:
            unknown[host.name] = answer.error if answer and answer.error else "no answer"
            continue
        gpus = parse_nvidia_smi(answer.stdout + answer.stderr, answer.exit_code)
        out[host.name] = tuple(busy_gpus(gpus.healthy, host.slots, policy))
    return out, unknown


def recheck(
    remote: Remote,
    hosts: Sequence[Host],
    timeout_s: float,
    note: Callable[[str], None],
    *,
    policy: PreflightPolicy = DEFAULT_POLICY,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], bool] = lambda: False,
) -> Recheck:
    """Ask ``hosts`` until each has free GPUs or ``timeout_s`` has passed (or ``stopped()``);
    say what it waits for and what it found."""
    started, t0 = time.time(), clock()
    pending = {h.name: h for h in hosts}
    first_busy: set[str] = set()
    waited: list[tuple[str, float]] = []
    left_out: list[tuple[str, str]] = []
    unknown: list[tuple[str, str]] = []
    looks = 0
    while pending and not stopped():
        busy, unasked = look(remote, tuple(pending.values()), policy)
        unknown += unasked.items()
        for host in unasked:
            pending.pop(host)
        elapsed = clock() - t0
        step = judge(busy, elapsed, timeout_s)
        new = [h for h in step.waiting if h not in first_busy]
        if new:
            example = busy[new[0]][0]
            note(f"re-check: waiting up to {timeout_s:.0f} s for the GPUs of "
                 f"{', '.join(new)} to be freed ({new[0]}: {example})")
            first_busy.update(new)
        waited += [(h, elapsed) for h in step.freed if h in first_busy]
        left_out += step.left_out
        for host in (*step.freed, *(h for h, _ in step.left_out)):
            pending.pop(host)
        if pending:
            sleep(INTERVALS_S[looks] if looks < len(INTERVALS_S) else INTERVAL_S)
            looks += 1
    result = Recheck(started, time.time(), len(hosts), tuple(waited), tuple(left_out),
                     tuple(unknown))
    if result.waited or result.left_out or result.unknown:
        note(f"re-check: {result.describe()}")
    return result
