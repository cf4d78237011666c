"""What the loopback-sshd tests share (test_remote_sshd.py: paramiko, test_openssh_sshd.py:
OpenSSH's ssh): the sshd's coordinates, a free port and an ed25519 key pair."""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    dir: Path
    port: int
    closed_port: int
    config: Path
    known_hosts: Path
    host_pub: str  # "ssh-ed25519 AAAA..."

    def trust(self, pub: str | None = None) -> None:
        names = f"[h-ok]:{self.port},[127.0.0.1]:{self.port}"
        self.known_hosts.write_text(f"{names} {pub or self.host_pub}\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def start_sshd(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``sshd -D -f config``, once it accepts connections on ``port``; its stderr in ``log``.
    The caller ends it (terminate, wait)."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"sshd did not start: {log.read_text()}") from None
            time.sleep(0.05)
