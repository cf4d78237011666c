"""What the loopback-sshd tests share (test_remote_sshd.py: paramiko, test_openssh_sshd.py:
OpenSSH's ssh): the sshd's coordinates, a free port and an ed25519 key pair."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


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
