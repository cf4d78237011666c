"""The first process of a simulated host: sets the host up, then runs and reaps its sshd.

Started by ``ringtrain.sim.sshd.start_holders`` as ``ip netns exec NS unshare --uts --mount
--propagation private -- python -I -S holder.py HOST HOSTS_FILE BLANK_FILE SSHD_CONFIG SSHD_LOG``
(``ip netns exec`` and ``unshare`` exec, so its PID is the one the caller spawned). It

* sets the hostname, mounts a private tmpfs on /run (sshd needs /run/sshd), bind-mounts the
  cluster's /etc/hosts and a blank ~/.bashrc (the machine's bashrc costs 0.4-0.8 s per ssh);
* becomes a child subreaper, so processes orphaned on this host (a session's background job,
  an sshd listener's sessions after ``stop_sshd``) are reaped here instead of turning into
  zombies under a PID 1 that may not reap;
* runs ``sshd -D`` as its child and answers signals: SIGUSR1 start sshd (if not running),
  SIGUSR2 stop sshd (open sessions stay), SIGTERM/SIGINT/SIGHUP stop sshd and exit;
* writes ``ready`` to stdout once set up and sshd spawned (readiness of sshd itself is its PidFile).

Standalone (stdlib only, no ringtrain import): it runs under ``-I -S`` and starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import signal
import socket
import subprocess
import sys

SSHD = "/usr/sbin/sshd"
PR_SET_CHILD_SUBREAPER = 36
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SIGNALS = {signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT,
           signal.SIGHUP}


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def set_up(host: str, hosts_file: str, blank: str) -> None:
    socket.sethostname(host)
    _mount("-t", "tmpfs", "-o", "mode=0755,size=16m", f"sim-{host}-run", "/run")
    os.mkdir("/run/sshd", 0o755)
    _mount("--bind", hosts_file, "/etc/hosts")
    bashrc = os.path.join(pwd.getpwuid(0).pw_dir, ".bashrc")
    if os.path.exists(bashrc):
        _mount("--bind", blank, bashrc)


def spawn_sshd(config: str, log: str) -> int:
    argv = [SSHD, "-D", "-f", config, "-E", log]
    return os.posix_spawn(SSHD, argv, {"PATH": STD_PATH}, setsigmask=())


def reap() -> set[int]:
    """Collect every exited child (ours and adopted orphans)."""
    done: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.add(pid)


def serve(config: str, log: str) -> int:
    sshd: int | None = spawn_sshd(config, log)
    while True:
        sig = signal.sigwaitinfo(SIGNALS).si_signo
        if sig == signal.SIGCHLD:
            if sshd in reap():
                sshd = None
        elif sig == signal.SIGUSR1:
            if sshd is None:
                sshd = spawn_sshd(config, log)
        elif sshd is not None:  # SIGUSR2 or a terminating signal: stop sshd
            os.kill(sshd, signal.SIGTERM)
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            # Reap sshd before leaving, so it never becomes an orphan.
            for _ in range(40):
                if sshd is None or sshd in reap():
                    break
                signal.sigtimedwait({signal.SIGCHLD}, 0.05)
            return 0


def main() -> int:
    host, hosts_file, blank, config, log = sys.argv[1:6]
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    set_up(host, hosts_file, blank)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write(f"prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}\n")
        return 1
    os.chdir("/")
    os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    return serve(config, log)


if __name__ == "__main__":
    sys.exit(main())
