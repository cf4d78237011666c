"""Open MPI hostfiles, read the way Open MPI 4.1's mpirun reads them. Pure: text in, Inventory out.

tests/integration/test_inventory_oracles.py checks this module against ``mpirun --display-map``
over the corpus in tests/unit/test_hostfile_openmpi_corpus.py. What Open MPI does, and so do we:

* a line is ``[user@]host [key=value ...]``; spaces around ``=`` are fine; ``#`` and ``//``
  comment to the end of the line, ``/* ... */`` anywhere (both of its ends also end a line);
* ``slots``, ``count`` and ``cpu`` give the slots; ``max_slots`` (``max-slots``, ``slots_max``,
  ``max_count``, ``cpu_max``, ...) the hard limit; ``username`` (``user_name``, ``user-name``) or
  ``user@host`` the SSH user;
* a host without ``slots`` has 1 slot, or ``max_slots`` when that is all its first line gives;
* a host listed again gets one more slot per line (``gpu01`` on three lines: 3 slots;
  ``gpu01 slots=2`` then ``gpu01``: 3), and a repeated line may not give ``slots`` (refused);
* names are matched as Open MPI matches them: without their domain (``gpu01.a`` is ``gpu01``),
  and ``localhost``, ``127.0.0.1`` and ``::1`` are all the launching machine.

Deliberate differences, listed in docs/INVENTORIES.md with the reasons: refused here but
read by Open MPI: ``slots=0``, words that are not ``key=value`` (Open MPI ignores them, so
``gpu01 4`` is 1 slot), ``max_slots`` below the slots in any order or after a repeated line, a
key given twice on one line, one host written two ways (``gpu01.a`` and ``gpu01.b``), two users
for one host, an unterminated ``/*``, exclusion (``^host``) and relative (``+n0``) nodes. Read
here but refused by Open MPI: ``[IPv6]`` in brackets and CRLF line ends.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ringtrain.hostfile.checks import Where, check_name, parse_count
from ringtrain.hostfile.model import Host, Inventory, user_problem

SLOTS_KEYS = ("slots", "count", "cpu")
MAX_SLOTS_KEYS = tuple(
    f"{a}{sep}{b}"
    for word in ("slots", "cpu", "count")
    for a, b in (("max", word), (word, "max"))
    for sep in ("_", "-")
)
USER_KEYS = ("username", "user_name", "user-name")
OPENMPI_KEYS = SLOTS_KEYS + MAX_SLOTS_KEYS + USER_KEYS
# Keys Open MPI 4.1 refuses in a hostfile, with what to write instead.
_INSTEAD = {"slot": "slots", "cpus": "slots", "user": "username", "max_slot": "max_slots"}
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_WHITE = " \t\f\v"
_TOKEN_RE = re.compile(
    rf"(?P<comment>#|//)|(?P<open>/\*)|(?P<eq>=)|(?P<word>(?:[^{_WHITE}=#/]|/(?![/*]))+)"
)
_LINE_HINT = "Open MPI hostfile lines look like 'gpu01 slots=4 max_slots=8'"


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    where: Where


@dataclass(slots=True)
class _Node:
    """One host as Open MPI's hostfile reader builds it, line by line."""

    name: str
    first: Where
    user: str | None
    slots: int = 1
    max_slots: int | None = None
    slots_given: bool = False


def parse_openmpi_hostfile(text: str, source: str) -> Inventory:
    """Open MPI hostfile -> Inventory, hosts in the order of their first line."""
    nodes: dict[str, _Node] = {}
    for tokens in _logical_lines(text, source):
        _read_line(tokens, nodes)
    if not nodes:
        raise Where(source).error("no hosts found", "add at least one host, e.g. 'gpu01 slots=4'")
    hosts = tuple(
        Host(name=n.name, slots=n.slots, max_slots=n.max_slots, user=n.user)
        for n in nodes.values()
    )
    return Inventory(hosts=hosts, source=source, format="openmpi")


def _logical_lines(text: str, source: str) -> Iterator[list[_Token]]:
    """Tokens per host line. A line ends at a newline and at either end of a ``/* */``."""
    block: Where | None = None
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        tokens: list[_Token] = []
        pos = 0
        while pos < len(line):
            if block is not None:
                end = line.find("*/", pos)
                if end < 0:
                    break
                block, pos = None, end + 2
                continue
            m = _TOKEN_RE.search(line, pos)
            if m is None or m.lastgroup == "comment":
                break
            pos = m.end()
            if m.lastgroup == "open":
                block = Where(source, lineno, m.start() + 1)
                if tokens:
                    yield tokens
                tokens = []
            else:
                tokens.append(_Token(m.group(), Where(source, lineno, m.start() + 1)))
        if tokens:
            yield tokens
    if block is not None:
        raise block.error(
            "'/*' comment is never closed (Open MPI would ignore the rest of the file)",
            "close the comment with */, or comment single lines with #",
        )


def _read_line(tokens: list[_Token], nodes: dict[str, _Node]) -> None:
    host = tokens[0]
    name, user = _host_name(host)
    pairs = _pairs(tokens[1:])
    key = node_key(name)
    node = nodes.get(key)
    if node is None:
        node = nodes[key] = _Node(name, host.where, user)
    else:
        _check_same_host(node, name, user, host.where)
        node.slots += 1  # Open MPI: every further line of a host is one more slot
        node.slots_given = True
    got_max = False
    seen: set[str] = set()
    for key_token, value in pairs:
        what = _key_kind(key_token, node)
        if what in seen:
            raise key_token.where.error(
                f"{what} is given twice for {node.name}", f"keep one {what}=N"
            )
        seen.add(what)
        if what == "slots":
            _set_slots(node, key_token, value)
        elif what == "max_slots":
            node.max_slots = parse_count(value.text, "max_slots", key_token.where)
            got_max = True
        else:
            _set_user(node, value)
    if got_max and not node.slots_given:
        node.slots, node.slots_given = node.max_slots or node.slots, True
    if node.max_slots is not None and node.slots > node.max_slots:
        again = "" if node.first == host.where else f" after {node.name}'s repeated lines"
        raise host.where.error(
            f"max_slots={node.max_slots} is less than slots={node.slots}{again}",
            "raise max_slots to at least slots, or drop max_slots",
        )


def _pairs(tokens: list[_Token]) -> list[tuple[_Token, _Token]]:
    """The ``key = value`` pairs after the host name."""
    pairs: list[tuple[_Token, _Token]] = []
    rest = tokens
    while rest:
        key = rest[0]
        if key.text == "=":
            raise key.where.error("'=' without a key before it", _LINE_HINT)
        if len(rest) < 2 or rest[1].text != "=":
            if _is_key(key.text):
                raise key.where.error(f"{key.text} has no '=' and value", f"write {key.text}=N")
            raise key.where.error(
                f"unexpected {key.text!r} after the host name (Open MPI would silently ignore "
                "it)",
                _LINE_HINT,
            )
        if len(rest) < 3 or rest[2].text == "=":
            raise key.where.error(f"{key.text}= has no value", f"write {key.text}=N")
        pairs.append((key, rest[2]))
        rest = rest[3:]
    return pairs


def _is_key(word: str) -> bool:
    return word in OPENMPI_KEYS or word in _INSTEAD


def _key_kind(token: _Token, node: _Node) -> str:
    key = token.text
    if key in SLOTS_KEYS:
        return "slots"
    if key in MAX_SLOTS_KEYS:
        return "max_slots"
    if key in USER_KEYS:
        return "username"
    if key in _INSTEAD:
        raise token.where.error(
            f"Open MPI does not accept {key!r} in a hostfile (mpirun would refuse the file)",
            f"write {_INSTEAD[key]}= instead, e.g. '{node.name} {_INSTEAD[key]}=...'",
        )
    raise token.where.error(
        f"unknown key {key!r}",
        "Open MPI hostfile keys are slots, max_slots and username, e.g. "
        "'gpu01 slots=4 max_slots=8'",
    )


def _set_slots(node: _Node, key: _Token, value: _Token) -> None:
    if value.text.strip() == "0":
        raise key.where.error(
            f"slots must be at least 1, got 0 (Open MPI would keep {node.name} with no rank)",
            "remove the line, or comment it out with #",
        )
    slots = parse_count(value.text, "slots", key.where)
    if node.slots_given:
        raise key.where.error(
            f"host {node.name!r} is listed twice (first at {node.first.text}) and this line "
            f"gives {key.text}={slots}; Open MPI refuses a slot count on a repeated host",
            f"list {node.name} once with its total slots, e.g. '{node.name} slots=N', or once "
            "per slot without slots=",
        )
    node.slots, node.slots_given = slots, True


def _set_user(node: _Node, value: _Token) -> None:
    problem = user_problem(value.text)
    if problem is not None:
        raise value.where.error(problem, "write a user name, e.g. username=ubuntu")
    if node.user not in (None, value.text):
        raise value.where.error(
            f"{node.name} has two users, {node.user} and {value.text}",
            "give each host one user",
        )
    node.user = value.text


def _host_name(token: _Token) -> tuple[str, str | None]:
    """``[user@]host`` -> (host, user); ``[IPv6]`` is unwrapped."""
    where = token.where
    if token.text == "=" or _is_key(token.text):
        raise where.error(
            f"the line starts with {token.text!r}, not with a host name",
            "start every line with its host: 'gpu01 slots=4'; a /* comment */ also ends a line",
        )
    user, at, text = token.text.rpartition("@")
    if at:
        problem = "'@' with no user before it" if not user else user_problem(user)
        if problem is not None:
            raise where.error(problem, "write user@host, e.g. ubuntu@gpu01, or username=ubuntu")
    if text[:1] in ("^", "+"):
        raise where.error(
            f"{text!r}: excluded (^host) and relative (+n0) nodes only mean something inside a "
            "resource manager's allocation",
            "list the hosts to use by name",
        )
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    elif text.count(":") == 1:
        raise where.error(
            f"{text!r} is MPICH machinefile syntax, not an Open MPI hostfile line",
            f"write '{text.replace(':', ' slots=')}', or pass --hosts-format mpich",
        )
    return check_name(text, where), user or None


def node_key(name: str) -> str:
    """The name Open MPI files a host under: local names are one machine, domains are cut."""
    if name in _LOCAL_NAMES:
        return "localhost"
    try:
        ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return name.split(".", 1)[0]
    return name


def _check_same_host(node: _Node, name: str, user: str | None, where: Where) -> None:
    if name != node.name:
        why = (
            "both name the launching machine"
            if node_key(name) == "localhost"
            else "are one host to Open MPI, which compares names without their domain"
        )
        raise where.error(
            f"{name!r} and {node.name!r} (at {node.first.text}) {why}; it would merge them "
            "into one node",
            "write each host under one name; distinct hosts need distinct short names",
        )
    if user is not None and node.user not in (None, user):
        raise where.error(f"{name} has two users, {node.user} and {user}",
                          "give each host one user")
    node.user = node.user or user
