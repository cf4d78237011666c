"""The one fake at the SSH seam: a Remote that answers from a table keyed by host and argv.

A call the table does not know fails the test, so a test cannot pass by accident on a command
it never meant to run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ringtrain.hostfile.model import Host
from ringtrain.remote import CmdResult, HostResults

SECTIONS = ("host", "gpu", "python", "mpi", "net")


@dataclass
class FakeRemote:
    """``on(host, argv, ...)`` registers an answer; ``run`` looks each host up by (host, argv)."""

    answers: dict[tuple[str, tuple[str, ...]], CmdResult] = field(default_factory=dict)
    calls: list[tuple[tuple[str, ...], tuple[str, ...], float]] = field(default_factory=list)
    inputs: list[bytes] = field(default_factory=list)  # stdin of each run_with_input call

    def on(
        self,
        host: str,
        argv: Sequence[str],
        *,
        stdout: str = "",
        stderr: str = "",
        exit_code: int | None = 0,
        error: str | None = None,
        duration_s: float = 0.01,
    ) -> FakeRemote:
        self.answers[(host, tuple(argv))] = CmdResult(
            host, exit_code, stdout, stderr, error, duration_s
        )
        return self

    def run(
        self, hosts: Sequence[Host], argv: Sequence[str], timeout: float
    ) -> HostResults:
        self.calls.append((tuple(h.name for h in hosts), tuple(argv), timeout))
        out = HostResults()
        for h in hosts:
            key = (h.name, tuple(argv))
            if key not in self.answers:
                raise AssertionError(f"FakeRemote: no answer for {h.name} running {argv[:2]}...")
            out[h.name] = self.answers[key]
        return out

    def run_with_input(
        self, hosts: Sequence[Host], argv: Sequence[str], data: bytes, timeout: float
    ) -> HostResults:
        self.inputs.append(data)
        return self.run(hosts, argv, timeout)

    def run_each(
        self, commands: Sequence[tuple[Host, Sequence[str]]], timeout: float
    ) -> HostResults:
        out = HostResults()
        for host, argv in commands:
            out.update(self.run([host], argv, timeout))
        return out


def probe_stdout(
    hostname: str,
    *,
    gpu: tuple[str, int] = ("", 0),
    python: tuple[str, int] | None = None,
    mpi: tuple[str, int] = ("mpirun (Open MPI) 4.1.4\n\nReport bugs to "
                            "http://www.open-mpi.org/community/help/", 0),
    net: str = "",
    horovod: str = "0.28.1",
    tensorflow: str = "2.15.1",
    py_version: str = "3.11.2",
) -> str:
    """What the probe script prints, section by section (same framing as PROBE_SCRIPT)."""
    if python is None:
        python = (f"python {py_version}\ntensorflow {tensorflow}\ntensorflow-cpu -\n"
                  f"tensorflow-gpu -\nhorovod {horovod}\nmpi4py 4.1.2", 0)
    bodies = {"host": (hostname, 0), "gpu": gpu, "python": python, "mpi": mpi, "net": (net, 0)}
    text = "@@ringtrain:probe 1@@\n"
    for name in SECTIONS:
        body, rc = bodies[name]
        text += f"@@ringtrain:begin {name}@@\n" + (body.rstrip("\n") + "\n" if body else "")
        text += f"@@ringtrain:end {rc}@@\n"
    return text + "@@ringtrain:done@@\n"


def gpu_rows(n: int, model: str = "NVIDIA A100-SXM4-80GB", total: int = 81920,
             used: int = 4, util: int = 0, driver: str = "535.129.03",
             busy: Mapping[int, tuple[int, int]] | None = None) -> str:
    """``n`` nvidia-smi CSV rows; ``busy`` maps index -> (MiB used, utilization %)."""
    rows = []
    for i in range(n):
        u, p = (busy or {}).get(i, (used, util))
        rows.append(f"{i}, {model}, GPU-{i:08x}-1111-2222-3333-444455556666, {total}, {u}, {p}, "
                    f"{driver}")
    return "\n".join(rows)


def ip_lines(*addrs: tuple[str, str]) -> str:
    """``ip -o addr show`` lines for (ifname, cidr) pairs, after a loopback line."""
    lines = ["1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever "
             "preferred_lft forever"]
    for i, (name, cidr) in enumerate(addrs, start=2):
        lines.append(f"{i}: {name}    inet {cidr} scope global {name}\\       valid_lft "
                     "forever preferred_lft forever")
    return "\n".join(lines)
