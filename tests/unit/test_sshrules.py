"""sshrules against real OpenSSH: random ssh_configs (seeded), every host's fields compared with
``ssh -G``'s, through the file ``--ssh-config`` gives ssh (sshg.layered: the config, then
/etc/ssh/ssh_config). RINGTRAIN_SSHRULES_CONFIGS raises the number of configs."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from ringtrain.remote import sshg, sshrules

SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(SSH is None, reason="needs OpenSSH's ssh")
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu10", "gpu11", "cpu1", "cpu2", "db.internal",
         "web.internal", "10.0.0.5", "login", "x-1"]
PATTERNS = [*HOSTS, "gpu*", "gpu0?", "*.internal", "*", "cpu?", "10.0.*", "?pu1*"]
VALUES = {
    "HostName": ["10.0.0.9", "%h.cluster", "n-%h", "10.0.1.1", "%h"],
    "User": ["u1", "u2", "root"],
    "Port": ["2200", "2201", "22", "0022"],
    "IdentityFile": ["~/.ssh/id_a", "/keys/%h", "~/.ssh/id_b", "/keys/shared"],
    "CertificateFile": ["~/.ssh/c1", "/certs/%h"],
    "IdentitiesOnly": ["yes", "no"],
    "UserKnownHostsFile": ["~/.ssh/kh1", "/kh2 /kh3", "~/kh4 ~/.ssh/kh5"],
    "GlobalKnownHostsFile": ["/etc/g1", "/etc/g2 /etc/g3"],
    "StrictHostKeyChecking": ["yes", "no", "ask", "accept-new", "off"],
    "ConnectTimeout": ["3", "10"],
    "ProxyJump": ["j1", "bob@j2:2022", "j1,j3"],
    "ProxyCommand": ["nc %h %p", "ssh -W %h:%p jump"],
    "HostKeyAlias": ["al_%h", "alias1"],
    "ServerAliveInterval": ["5"],
    "ForwardAgent": ["no"],
    "SendEnv": ["LANG"],
}


def _option(rng: random.Random) -> str:
    key = rng.choice(list(VALUES))
    shown = rng.choice([key, key.lower(), key.upper()])
    return f"    {shown}{rng.choice([' ', '=', ' = '])}{rng.choice(VALUES[key])}"


def _patterns(rng: random.Random, pool: list[str]) -> list[str]:
    out = rng.sample(pool, rng.randint(1, 3))
    if rng.random() < 0.3:
        out.append("!" + rng.choice(pool))
    return out


def _block(rng: random.Random) -> list[str]:
    roll = rng.random()
    if roll < 0.65:
        head = "Host " + " ".join(_patterns(rng, PATTERNS))
    elif roll < 0.72:
        head = "Match all"
    else:
        criteria = []
        for _ in range(rng.randint(1, 2)):
            name = rng.choice(["host", "originalhost", "user", "localuser"])
            pool = {"user": ["u1", "u2", "root", "u*"], "localuser": ["root", "nobody", "r*"]}
            listed = _patterns(rng, pool.get(name, [*PATTERNS, "10.0.0.*", "*.cluster"]))
            criteria.append(f"{'!' if rng.random() < 0.2 else ''}{name} {','.join(listed)}")
        head = "Match " + " ".join(criteria)
    return [head, *(_option(rng) for _ in range(rng.randint(1, 4)))]


def random_config(rng: random.Random, folder: Path) -> Path:
    """A main file (top lines, an Include of a file and of a glob, blocks) and its includes."""
    (folder / "conf.d").mkdir(parents=True, exist_ok=True)
    for i in range(rng.randint(0, 2)):
        lines = [ln for _ in range(rng.randint(1, 3)) for ln in _block(rng)]
        (folder / "conf.d" / f"{i}.conf").write_text("\n".join(lines) + "\n")
    (folder / "extra").write_text("\n".join(
        [ln for _ in range(rng.randint(0, 3)) for ln in _block(rng)]) + "\n")
    main = [_option(rng).strip() for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.6:
        main.append(f"Include {folder / 'extra'}")
    if rng.random() < 0.5:
        main.append(f'Include "{folder}/conf.d/*.conf"')
    main += [ln for _ in range(rng.randint(1, 8)) for ln in _block(rng)]
    path = folder / "config"
    path.write_text("# generated\n" + "\n".join(main) + "\n")
    return path


def compare(seed: int, folder: Path) -> tuple[int, int, list[str]]:
    """(hosts compared, hosts the rules declined, differences) for one random config."""
    config = random_config(random.Random(seed), folder)
    ssh = sshg.OpenSshConfig(config, str(SSH))
    try:
        rules = ssh.rules()
    except sshrules.Unsupported:
        return 0, len(HOSTS), []
    compared, declined, diffs = 0, 0, []
    for host in HOSTS:
        real = ssh._ask(host)
        try:
            mine = rules.resolve(host)[0]
        except sshrules.Unsupported:
            declined += 1
            continue
        compared += 1
        theirs = real if isinstance(real, str) else sshg.project(real)
        if theirs != mine:
            diffs.append(f"seed {seed} host {host}: ssh -G {theirs}, rules {mine}\n"
                         f"{config.read_text()}")
    return compared, declined, diffs


def test_rules_give_ssh_g_s_answer_on_random_configs(tmp_path: Path) -> None:
    configs = int(os.environ.get("RINGTRAIN_SSHRULES_CONFIGS", "40"))
    compared = declined = 0
    diffs: list[str] = []
    for seed in range(configs):
        c, d, found = compare(seed, tmp_path / str(seed))
        compared, declined, diffs = compared + c, declined + d, diffs + found
    print(f"{configs} configs: {compared} hosts compared, {declined} declined")
    assert not diffs, diffs[0]
    assert compared >= 0.8 * configs * len(HOSTS)  # the rules answer most hosts


def test_a_stanza_per_host_is_answered_and_checked_against_ssh_g(tmp_path: Path) -> None:
    """prefetch of many hosts: the rules answer them all, after a sample agreed with ssh -G."""
    config = tmp_path / "config"
    names = [f"n{i:03d}" for i in range(200)]
    config.write_text("Host *.x\n  User ops\n" + "".join(
        f"Host {n}\n  HostName 10.1.0.{i % 250}\n  Port {2200 + i % 3}\n  User u{i % 4}\n"
        for i, n in enumerate(names)) + "Match host 10.1.0.1*\n  ConnectTimeout 7\n")
    ssh = sshg.OpenSshConfig(config, str(SSH))
    asked: list[str] = []
    real_ask = ssh._ask
    ssh._ask = lambda h: (asked.append(h), real_ask(h))[1]  # type: ignore[method-assign]
    ssh.prefetch(names)
    assert len(asked) <= sshg.SAMPLES
    for n in ("n000", "n010", "n123", "n199"):
        assert sshg.project(ssh.lookup(n)) == sshg.project(real_ask(n))  # type: ignore[arg-type]


def test_a_config_the_rules_get_wrong_falls_back_to_ssh_g(tmp_path: Path) -> None:
    """The sample disagrees (here: rules that lie), so every host is asked of ssh -G."""
    config = tmp_path / "config"
    config.write_text("Host n*\n  Port 2200\n")
    ssh = sshg.OpenSshConfig(config, str(SSH))
    real_rules = ssh.rules

    def lying() -> sshrules.Rules:
        rules = real_rules()
        rules.defaults = {**rules.defaults, "user": "someone-else"}
        return rules

    ssh.rules = lying  # type: ignore[method-assign]
    names = [f"n{i}" for i in range(40)]
    ssh.prefetch(names)
    assert all(ssh.lookup(n)["user"] != "someone-else" for n in names)
    assert ssh.lookup("n5")["port"] == "2200"


@pytest.mark.parametrize("text", [
    "Match exec true\n  Port 1\n", "Host a\n  Include /x\n", "CanonicalizeHostname yes\n",
    "Match canonical all\n", "Host a\n  ProxyCommand none\n", "Host a,b\n  Port 1\n",
])
def test_what_the_rules_do_not_model_is_declined(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    with pytest.raises(sshrules.Unsupported):
        sshrules.Rules(sshrules.load([(config, tmp_path)], str(tmp_path)), {}, "me",
                       str(tmp_path)).resolve("a")
