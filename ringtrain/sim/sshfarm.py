"""Many simulated SSH hosts in one process, for scale runs (issue 14): one paramiko server
listening on many loopback addresses (127.3.x.y by default, port 2222; all of 127.0.0.0/8 is this
machine's, so nothing is configured), each address with its own host key in the known_hosts
file it writes. The launcher's real SSH path (strict host keys, ssh_config, fan-out) runs
unchanged against it; only the commands are answered from a table instead of run:

* the probe (``@@ringtrain:probe``): the host's name, 8 GPUs (every ``--fail-every``-th host:
  nvidia-smi failing, as with a lost GPU), the Python stack, Open MPI and an interface, and the
  doctor's sections of an 8 x H100 host with 8 InfiniBand NICs (every 10th host: a GPU on a
  x8 link and an Xid 79);
* the reaper (``ringtrain.rank.reaper``): nothing found, nothing left;
* ``true``: exit 0 (horovodrun's SSH check runs it on every host);
* anything else: exit 127.

    python -m ringtrain.sim.sshfarm --hosts 1000 --dir DIR

writes ``DIR/ssh_config``, ``DIR/known_hosts``, ``DIR/client_key`` and ``DIR/hosts.txt``, prints
``READY <n>`` and serves until SIGTERM. It is a separate process so that its CPU is measured
apart from the launcher's (``ringtrain.bench.launcher.scale``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import queue
import resource
import selectors
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import paramiko

PORT = 2222
WORKERS = 4


def address(i: int, net: int = 3) -> str:
    """Host i (0-based) -> its loopback address, 127.<net>.x.y."""
    return f"127.{net}.{i // 250}.{i % 250 + 1}"


def name(i: int) -> str:
    return f"f{i:05d}"


PROBE_TEMPLATE = """\
@@ringtrain:probe 1@@
@@ringtrain:begin host@@
{name}
@@ringtrain:end 0@@
@@ringtrain:begin gpu@@
{gpus}
@@ringtrain:end {gpu_exit}@@
@@ringtrain:begin python@@
python 3.11.2
tensorflow 2.15.1
tensorflow-cpu -
tensorflow-gpu -
horovod 0.28.1
mpi4py 4.1.2
cudnn nvidia-cudnn-cu12
cudnn-version 8.9.4.25
tf-cudnn nvidia-cudnn-cu12==8.9.4.25
horovod-nccl yes
sim-cpu-training -
@@ringtrain:end 0@@
@@ringtrain:begin mpi@@
mpirun (Open MPI) 4.1.4
@@ringtrain:end 0@@
@@ringtrain:begin net@@
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever
2: eth0    inet 10.{hi}.{lo}.11/8 brd 10.255.255.255 scope global eth0\\       valid_lft forever
@@ringtrain:end 0@@
{doctor}@@ringtrain:done@@
"""
SICK_EVERY = 10  # every 10th host: GPU 5 on a PCIe x8 link and an Xid 79 on GPU 2 (the doctor)
_HEALTH = ("#fields index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
           "pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active,"
           "clocks_throttle_reasons.active,ecc.mode.current,"
           "ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,"
           "remapped_rows.failure,gpu_recovery_action,temperature.gpu,utilization.gpu")
_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def doctor_sections(i: int) -> str:
    """The doctor's sections of an 8 x H100 host with 8 NICs (NV18, R580), in the formats of
    the real captures (tests/unit/golden/probe/doctor/); every SICK_EVERY-th host is sick."""
    sick = i % SICK_EVERY == SICK_EVERY - 1
    rows = [f"{g}, 00000000:{b}:00.0, 5, 5, {8 if sick and g == 5 else 16}, 16, "
            "0x0000000000000001, 0x0000000000000001, Enabled, 0, [N/A], No, No, None, 33, 0"
            for g, b in enumerate(_BUSES)]
    pcie = "".join(f"GPU 00000000:{b}:00.0\n        Replays Since Reset"
                   f"{' ' * 28}: 0\n        Replay Number Rollovers{' ' * 24}: 0\n"
                   for b in _BUSES)
    links = "".join(f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-0000-0000-0000-{g:012x})"
                    "\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(18))
                    for g in range(8))
    cols = [f"GPU{g}" for g in range(8)] + [f"NIC{n}" for n in range(8)]
    topo = "\t" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\n"
    topo += "".join("\t".join([f"GPU{g}", *(" X " if o == g else "NV18" for o in range(8)),
                               *("PIX" if n == g else "SYS" for n in range(8)),
                               "0-55" if g < 4 else "56-111", str(g // 4), "", "N/A"]) + "\n"
                    for g in range(8))
    topo += "\nNIC Legend:\n\n" + "".join(f"  NIC{n}: mlx5_{n}\n" for n in range(8))
    xid = ("[ 5211.304115] NVRM: Xid (PCI:0000:3a:00): 79, pid=0, name=, GPU has fallen off "
           "the bus.\n") if sick else ""
    ports = "".join(f"port mlx5_{n} 1|4: ACTIVE|5: LinkUp|400 Gb/sec (4X NDR)|InfiniBand|0\n"
                    for n in range(8))
    nets = "net eth0|25000|up|\n" + "".join(f"net ib{n}||up|mlx5_{n}\n" for n in range(8))
    sections = (("health", _HEALTH + "\n" + "\n".join(rows) + "\n"), ("apps", ""),
                ("pcie", pcie), ("nvlink", links), ("topo", topo),
                ("xid", f"#boot 6f1c2a4e-{i:04x}\n#uptime 86400.12\n" + xid),
                ("links", ports + nets), ("jobs", ""))
    return "".join(f"@@ringtrain:begin {name}@@\n{body}@@ringtrain:end 0@@\n"
                   for name, body in sections)


def probe_output(i: int, fail_every: int) -> str:
    if fail_every and i % fail_every == fail_every - 1:
        gpus, code = "Unable to determine the device handle for GPU0000:07:00.0: GPU is lost.", 15
    else:
        gpus = "\n".join(
            f"{g}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-0000-0000-0000-{g:012x}, 81559, 0, 0, "
            "550.54.15" for g in range(8))
        code = 0
    return PROBE_TEMPLATE.format(name=name(i), gpus=gpus, gpu_exit=code, hi=i // 250,
                                 lo=i % 250, doctor=doctor_sections(i))


def answer(i: int, command: str, fail_every: int) -> tuple[str, int]:
    """(stdout, exit status) for ``command`` on host i."""
    if "@@ringtrain:probe" in command:
        return probe_output(i, fail_every), 0
    if "ringtrain.rank.reaper" in command:
        return '{"found": [], "left": []}\n', 0
    if command.strip() == "true":
        return "", 0
    return "", 127


class _Server(paramiko.ServerInterface):  # type: ignore[misc]
    def __init__(self, host: int, client_key: paramiko.PKey, work: queue.Queue[Any]) -> None:
        self.host = host
        self.client_key = client_key
        self.work = work

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.get_base64() == self.client_key.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.work.put((self.host, channel, command.decode(errors="replace")))
        return True


def _respond(work: queue.Queue[Any], fail_every: int) -> None:
    while True:
        host, channel, command = work.get()
        with contextlib.suppress(Exception):  # the client may be gone
            out, code = answer(host, command, fail_every)
            if out:
                channel.sendall(out.encode())
            channel.send_exit_status(code)
            channel.shutdown_write()
            channel.close()


def write_client_files(directory: Path, n: int, keys: list[paramiko.PKey],
                       client_key: paramiko.PKey, net: int = 3) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / "client_key"
    client_key.write_private_key_file(str(key_file))
    key_file.chmod(0o600)
    known = [f"[{address(i, net)}]:{PORT} {k.get_name()} {k.get_base64()}"
             for i, k in enumerate(keys)]
    (directory / "known_hosts").write_text("\n".join(known) + "\n")
    config = [f"Host {name(i)}\n  HostName {address(i, net)}\n" for i in range(n)]
    config.append(f"Host *\n  Port {PORT}\n  User root\n  IdentityFile {key_file}\n"
                  "  IdentitiesOnly yes\n")
    (directory / "ssh_config").write_text("".join(config))
    (directory / "hosts.txt").write_text("".join(f"{name(i)} slots=8\n" for i in range(n)))


def serve(n: int, directory: Path, fail_every: int = 0, net: int = 3) -> None:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # resets by clients that are done
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    keys = [paramiko.ECDSAKey.generate() for _ in range(n)]
    client_key = paramiko.ECDSAKey.generate()
    write_client_files(directory, n, keys, client_key, net)
    work: queue.Queue[Any] = queue.Queue()
    for _ in range(WORKERS):
        threading.Thread(target=_respond, args=(work, fail_every), daemon=True).start()
    sel = selectors.DefaultSelector()
    for i in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address(i, net), PORT))
        sock.listen(64)
        sel.register(sock, selectors.EVENT_READ, i)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"READY {n}", flush=True)
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.5):
            # a failed handshake (a client that refuses the host key) ends its own transport,
            # never the farm; with an event, start_server negotiates in the transport's thread
            # instead of blocking this loop, so handshakes run side by side as with sshd
            with contextlib.suppress(Exception):
                conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                transport = paramiko.Transport(conn)
                transport.add_server_key(keys[key.data])
                transport.start_server(event=threading.Event(),
                                       server=_Server(key.data, client_key, work))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--fail-every", type=int, default=0,
                   help="every N-th host answers the probe with a lost GPU (0: none)")
    p.add_argument("--net", type=int, default=3,
                   help="the hosts' addresses are 127.NET.x.y (two farms need two nets)")
    args = p.parse_args(argv)
    if not 1 <= args.hosts <= 60_000 or not 1 <= args.net <= 254:
        print("sshfarm: --hosts must be 1..60000 and --net 1..254", file=sys.stderr)
        return 2
    serve(args.hosts, args.dir, args.fail_every, args.net)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
