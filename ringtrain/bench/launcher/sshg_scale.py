"""What the probe's ssh config lookups cost with a ``Host`` stanza per host (issue 41 item 2).

``python -m ringtrain.bench.launcher.sshg_scale --hosts 1000,3000,10000``

Writes an ssh_config with one stanza per host (HostName, User, Port, IdentityFile), a wildcard
stanza, a ``Match host`` and an ``Include`` of a second file, then resolves every host through
``OpenSshConfig.prefetch`` (the probe's call, ``--ssh-config`` layered with the system's file)
two ways: ``ssh -G`` per host (before: ``sshg.RULES_FROM`` set out of reach) and today's (the
config's rules, checked against ``ssh -G`` on a sample). Prints wall time and the launcher's CPU
per host, its ``ssh`` children included. ``--old-sample N``: time the old way on N hosts only
(it is quadratic; its wall time for all N hosts is the sample's, scaled). Both answers are
compared, host by host, where both were computed.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from ringtrain.remote import sshg


def write_config(folder: Path, n: int) -> tuple[Path, list[str]]:
    names = [f"gpu{i:05d}" for i in range(n)]
    (folder / "site.conf").write_text(
        "Host *.mgmt\n  User admin\nHost gpu*\n  ServerAliveInterval 5\n")
    lines = [f"Include {folder / 'site.conf'}", "Host login\n  HostName 10.255.0.1"]
    for i, name in enumerate(names):
        lines.append(f"Host {name}\n  HostName 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n"
                     f"  User u{i % 7}\n  Port {2200 + i % 5}\n  IdentityFile ~/.ssh/id_{i % 3}")
    lines += ["Match host 10.0.1.*\n  ConnectTimeout 7",
              "Host gpu*\n  StrictHostKeyChecking accept-new\n  ProxyJump login",
              "Host *\n  IdentitiesOnly yes"]
    path = folder / "config"
    path.write_text("\n".join(lines) + "\n")
    return path, names


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(config: Path, names: list[str], *,
            rules: bool) -> tuple[float, float, sshg.OpenSshConfig]:
    ssh = sshg.OpenSshConfig(config)
    saved = sshg.RULES_FROM
    sshg.RULES_FROM = saved if rules else len(names) + 1
    try:
        cpu0, wall0 = _cpu(), time.perf_counter()
        ssh.prefetch(names)
        return time.perf_counter() - wall0, _cpu() - cpu0, ssh
    finally:
        sshg.RULES_FROM = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1000,3000,10000")
    ap.add_argument("--old-sample", type=int, default=1000,
                    help="hosts the old way (ssh -G per host) is timed on, at most")
    args = ap.parse_args()
    print(f"{'hosts':>6} | {'ssh -G per host':>28} | {'rules + sample':>28} | same answers")
    for n in (int(x) for x in args.hosts.split(",")):
        with tempfile.TemporaryDirectory(prefix="sshg-scale-") as tmp:
            config, names = write_config(Path(tmp), n)
            new_wall, new_cpu, new = measure(config, names, rules=True)
            sample = names[:: max(1, n // args.old_sample)][: args.old_sample]
            old_wall, old_cpu, old = measure(config, sample, rules=False)
            same = sum(sshg.project(old.lookup(h)) == sshg.project(new.lookup(h)) for h in sample)
            shown = f"{n}" if len(sample) == n else f"{len(sample)} of {n}"
            old_per_host = old_cpu / len(sample) * 1e3
            print(f"{n:>6} | {old_wall * n / len(sample):>7.1f} s {old_per_host:>6.2f} ms/host"
                  f" ({shown}) | {new_wall:>7.2f} s {new_cpu / n * 1e3:>6.3f} ms/host {'':>6} | "
                  f"{same}/{len(sample)}")


if __name__ == "__main__":
    main()
