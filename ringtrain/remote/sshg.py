"""Each host's SSH settings as OpenSSH itself resolves them: ``ssh [-F CONFIG] -G HOST``.

mpirun and horovodrun reach the hosts with OpenSSH, which reads ``Include``,
``/etc/ssh/ssh_config`` (without ``-F``), ``Match``, tokens such as ``%h`` and ``ProxyJump``.
paramiko's reader ignores the first two and refused the last, so the probe could reach another
endpoint, as another user, than the job would. Here OpenSSH is the truth: one ``ssh -G`` per
host, in parallel (bounded), once per host per run (cached), its answer handed to
``targets.resolve_target`` in paramiko's key names.

``ssh -G`` re-reads the whole config per host, so a config with a stanza per host made that
quadratic. For many hosts, ``prefetch`` evaluates the config once with OpenSSH's rules
(remote/sshrules.py) and trusts that only after ``ssh -G`` gave the same fields for a sample:
one host per distinct set of generic stanzas that applied (up to SAMPLES), plus the first and
the last. A mismatch, a refusal or a construct the rules do not model sends the hosts (or that
host) to ``ssh -G`` as before.

``parse`` is pure. ``ssh -G`` prints every option, defaults included; ``none`` means unset.
"""

from __future__ import annotations

import atexit
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ringtrain.remote import sshrules
from ringtrain.remote.sshconf import SYSTEM_CONFIG, render_layered

log = logging.getLogger(__name__)

CONCURRENCY = 16
TIMEOUT_S = 10.0
RULES_FROM = 32  # hosts in one prefetch from which the rules are worth their sample
SAMPLES = 8
_LISTS = frozenset({"identityfile", "certificatefile", "localforward", "remoteforward",
                    "dynamicforward", "sendenv", "setenv"})
_UNSET_WHEN_NONE = frozenset({"proxycommand", "proxyjump", "connecttimeout", "hostkeyalias"})


def parse(text: str) -> dict[str, Any]:
    """``ssh -G``'s lines (``key value...``) as paramiko's lookup would give them: a list for
    the keys that may repeat, a string for the others; ``none`` left out where it means unset.
    ``_openssh`` marks the answer as OpenSSH's (its IdentityFile list holds defaults)."""
    out: dict[str, Any] = {"_openssh": True}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        key, value = key.lower(), value.strip()
        if not key or (key in _UNSET_WHEN_NONE and value.lower() == "none"):
            continue
        if key in _LISTS:
            out.setdefault(key, []).append(value)
        else:
            out.setdefault(key, value)
    return out


def project(answer: dict[str, Any]) -> dict[str, Any]:
    """The fields of a parsed ``ssh -G`` answer that sshrules models (those the probe reads)."""
    return {k: v for k, v in answer.items() if k in sshrules.FIELDS or k == "_openssh"}


_LAYERED: dict[Path, Path] = {}
_LAYERED_LOCK = threading.Lock()


def layered(path: Path) -> Path:
    """The file to give ``ssh -F`` for ``--ssh-config path`` (sshconf.render_layered: it,
    then the system's ssh_config), written once per process in a private folder."""
    with _LAYERED_LOCK:
        if path not in _LAYERED:
            folder = Path(tempfile.mkdtemp(prefix="ringtrain-ssh-"))  # 0700, ours
            atexit.register(shutil.rmtree, folder, True)
            file = folder / "ssh_config"
            file.write_text(render_layered(path))
            _LAYERED[path] = file
        return _LAYERED[path]


class OpenSshConfig:
    """``lookup(host)`` from ``ssh -G``, cached; ``prefetch(hosts)`` asks for many at once."""

    def __init__(self, path: Path | None, ssh: str = "ssh",
                 concurrency: int = CONCURRENCY) -> None:
        self.path, self.ssh, self.concurrency = path, ssh, concurrency
        self._cache: dict[str, dict[str, Any] | str] = {}

    def argv(self, host: str) -> tuple[str, ...]:
        config = ("-F", str(layered(self.path))) if self.path is not None else ()
        return (self.ssh, *config, "-G", "--", host)

    def prefetch(self, hosts: Sequence[str]) -> None:
        todo = [h for h in dict.fromkeys(hosts) if h not in self._cache]
        if len(todo) >= RULES_FROM:
            self._cache.update(self._by_rules(todo))
            todo = [h for h in todo if h not in self._cache]
        self._ask_many(todo)

    def _ask_many(self, todo: Sequence[str]) -> None:
        if not todo:
            return
        with ThreadPoolExecutor(min(self.concurrency, len(todo)),
                                thread_name_prefix="ssh-G") as pool:
            for host, answer in zip(todo, pool.map(self._ask, todo), strict=True):
                self._cache[host] = answer

    def _by_rules(self, todo: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The hosts the rules answer, once ``ssh -G`` agreed on a sample; {} when in doubt."""
        try:
            rules = self.rules()
        except sshrules.Unsupported as err:
            log.debug("ssh -G per host: %s", err)
            return {}
        answers: dict[str, dict[str, Any]] = {}
        traces: dict[tuple[int, ...], str] = {}
        for host in todo:
            try:
                answers[host], trace = rules.resolve(host)
            except sshrules.Unsupported as err:
                log.debug("ssh -G for %s: %s", host, err)
                continue
            traces.setdefault(trace, host)
        named = list(answers)
        sample = list(dict.fromkeys([*named[:1], *named[-1:], *traces.values()]))[:SAMPLES]
        self._ask_many([h for h in sample if h not in self._cache])
        for host in sample:
            real = self._cache[host]
            if isinstance(real, str) or project(real) != answers[host]:
                log.info("ssh -G for every host: the config's rules gave %s another answer "
                         "than ssh -G", host)
                return {}
        return answers

    def rules(self) -> sshrules.Rules:
        """The config's rules, read once (sshrules.Unsupported where they do not apply)."""
        me = pwd.getpwuid(os.getuid())  # OpenSSH's user and ~, whatever $USER and $HOME say
        home = me.pw_dir
        roots = ([(layered(self.path), Path(home, ".ssh"))] if self.path is not None else
                 [(Path(home, ".ssh", "config"), Path(home, ".ssh")),
                  (Path(SYSTEM_CONFIG), Path(SYSTEM_CONFIG).parent)])
        blocks = sshrules.load(roots, home)
        done = subprocess.run((self.ssh, "-F", os.devnull, "-G", "--", "defaults.invalid"),
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise sshrules.Unsupported(f"ssh -G without a config: {done.stderr.strip()}")
        defaults = parse(done.stdout)
        return sshrules.Rules(blocks, defaults, me.pw_name, home)

    def lookup(self, hostname: str) -> dict[str, Any]:
        """OpenSSH's settings for ``hostname``; ValueError (with ssh's words) when it refuses."""
        if hostname not in self._cache:
            self._cache[hostname] = self._ask(hostname)
        answer = self._cache[hostname]
        if isinstance(answer, str):
            raise ValueError(answer)
        return answer

    def _ask(self, host: str) -> dict[str, Any] | str:
        # said with the user's config, not the file that layers it with the system's
        shown = " ".join((self.ssh, *(("-F", str(self.path)) if self.path else ()), "-G", host))
        try:
            done = subprocess.run(self.argv(host), capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"`{shown}` failed: {err}"
        if done.returncode != 0:
            said = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
            return f"`{shown}`: {said}"
        return parse(done.stdout)
