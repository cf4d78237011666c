"""The YAML/TOML inventory schema, applied to a positioned document tree. Pure.

The schema itself is documented in ``ringtrain/hostfile/__init__.py``. ``Node`` is the common
tree both readers (``structured.py``) produce, so both formats share one validator and every
error can point at a line and column.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from ringtrain.hostfile.checks import (
    UniqueHosts,
    Where,
    check_count,
    check_max_slots,
    check_name,
)
from ringtrain.hostfile.model import (
    Host,
    Inventory,
    group_problem,
    identity_file_problem,
    label_problem,
    port_problem,
    user_problem,
)
from ringtrain.hostfile.nodeset import HostListError, expand, is_host_list

_SETTINGS = ("slots", "max_slots", "user", "port", "identity_file", "labels")
_TOP_KEYS = ("defaults", "groups", "hosts")
_GROUP_KEYS = (*_SETTINGS, "hosts")
_HOST_KEYS = ("name", *_SETTINGS)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Node:
    """A document node with its position. ``kind`` is "map", "seq" or "scalar"."""

    kind: str
    line: int | None
    column: int | None
    value: object = None
    items: tuple[Node, ...] = ()
    entries: tuple[tuple[str, Node, Node], ...] = ()  # key, key node, value node


@dataclass(frozen=True, slots=True)
class _Settings:
    slots: int | None = None
    max_slots: int | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def over(self, base: _Settings) -> _Settings:
        """These settings on top of ``base``; labels merge key by key."""
        labels = dict(base.labels)
        labels.update(self.labels)
        return _Settings(
            slots=self.slots if self.slots is not None else base.slots,
            max_slots=self.max_slots if self.max_slots is not None else base.max_slots,
            user=self.user if self.user is not None else base.user,
            port=self.port if self.port is not None else base.port,
            identity_file=self.identity_file if self.identity_file is not None
            else base.identity_file,
            labels=tuple(labels.items()),
        )

    def host(self, name: str, where: Where) -> Host:
        slots = self.slots if self.slots is not None else 1
        check_max_slots(slots, self.max_slots, where)
        return Host(
            name=name, slots=slots, max_slots=self.max_slots, labels=self.labels,
            user=self.user, port=self.port, identity_file=self.identity_file,
        )


def build_inventory(root: Node, source: str, fmt: str) -> Inventory:
    """Validate the document tree and build the Inventory, hosts in document order."""
    top = Where(source)
    _expect(root, "map", "the inventory", _at(source, root))
    _check_keys(root, _TOP_KEYS, "the top level", source)
    defaults = _Settings()
    for key, _, value in root.entries:
        if key == "defaults":
            _expect(value, "map", "defaults", _at(source, value))
            _check_keys(value, _SETTINGS, "defaults", source)
            defaults = _settings(value, source)
    hosts = UniqueHosts()
    groups: list[tuple[str, tuple[str, ...]]] = []
    for key, key_node, value in root.entries:
        if key == "hosts":
            _host_list(value, defaults, hosts, source)
        elif key == "groups":
            _expect(value, "map", "groups", _at(source, value))
            groups.extend(_group(entry, defaults, hosts, source) for entry in value.entries)
        elif key != "defaults":  # pragma: no cover - _check_keys refused it
            raise _at(source, key_node).error(f"unknown key {key!r}", "remove it")
    example = "hosts: [gpu01] or a group with hosts"
    return Inventory(
        hosts=hosts.result(top, example), source=source, format=fmt, groups=tuple(groups)
    )


def _group(
    entry: tuple[str, Node, Node], defaults: _Settings, hosts: UniqueHosts, source: str
) -> tuple[str, tuple[str, ...]]:
    name, name_node, group = entry
    problem = group_problem(name)
    if problem is not None:
        raise _at(source, name_node).error(problem, "name groups like rack1 or pod-a")
    _expect(group, "map", f"group {name!r}", _at(source, group))
    _check_keys(group, _GROUP_KEYS, f"group {name!r}", source)
    settings = _settings(group, source).over(defaults)
    member_node = _get(group, "hosts")
    if member_node is None:
        raise _at(source, group).error(
            f"group {name!r} has no hosts", f"add 'hosts: [...]' to group {name!r}"
        )
    return name, _host_list(member_node, settings, hosts, source)


def _host_list(node: Node, settings: _Settings, hosts: UniqueHosts, source: str) -> tuple[str, ...]:
    _expect(node, "seq", "hosts", _at(source, node))
    names: list[str] = []
    for item in node.items:
        for host in _host_entry(item, settings, source):
            hosts.add(host, _at(source, item))
            names.append(host.name)
    return tuple(names)


def _host_entry(node: Node, settings: _Settings, source: str) -> tuple[Host, ...]:
    where = _at(source, node)
    if node.kind == "scalar" and isinstance(node.value, str):
        return tuple(settings.host(n, where) for n in _names(node.value, where))
    if node.kind != "map":
        raise where.error(
            f"a host entry must be a name or a mapping, got {_describe(node)}",
            "write '- gpu01', '- gpu[01-04]' or '- {name: gpu01, slots: 4}'; quote numeric names",
        )
    _check_keys(node, _HOST_KEYS, "a host entry", source)
    name_node = _get(node, "name")
    if name_node is None:
        raise where.error("host entry has no name", "add 'name: gpu01' to the entry")
    name = _string(name_node, "name", source)
    own = _settings(node, source).over(settings)
    return tuple(own.host(n, _at(source, name_node)) for n in _names(name, _at(source, name_node)))


def _names(text: str, where: Where) -> tuple[str, ...]:
    if not is_host_list(text):
        return (check_name(text, where),)
    try:
        return tuple(check_name(n, where) for n in expand(text))
    except HostListError as err:
        raise where.error(
            f"bad host list {text!r}: {err}", err.hint or "write host lists like gpu[01-04,07]"
        ) from None


def _settings(node: Node, source: str) -> _Settings:
    found = _Settings()
    for key, _, value in node.entries:
        where = _at(source, value)
        if key == "slots":
            found = replace(found, slots=check_count(_int(value, key, source), key, where))
        elif key == "max_slots":
            found = replace(found, max_slots=check_count(_int(value, key, source), key, where))
        elif key == "port":
            found = replace(found, port=_checked(_int(value, key, source), port_problem, where))
        elif key == "user":
            found = replace(found, user=_checked(_string(value, key, source), user_problem, where))
        elif key == "identity_file":
            path = _checked(_string(value, key, source), identity_file_problem, where)
            found = replace(found, identity_file=path)
        elif key == "labels":
            found = replace(found, labels=_labels(value, source))
    return found


def _labels(node: Node, source: str) -> tuple[tuple[str, str], ...]:
    _expect(node, "map", "labels", _at(source, node))
    labels: list[tuple[str, str]] = []
    for key, key_node, value in node.entries:
        if value.kind != "scalar" or isinstance(value.value, bool) or not isinstance(
            value.value, (str, int)
        ):
            raise _at(source, value).error(
                f"label {key!r} must be text or a whole number, got {_describe(value)}",
                f"quote the value, e.g. {key}: \"...\"",
            )
        text = str(value.value)
        problem = label_problem(key, text)
        if problem is not None:
            raise _at(source, key_node).error(problem, "use labels like rack: r1 or gpu: a100")
        labels.append((key, text))
    return tuple(labels)


def _checked(value: _T, problem_of: Callable[[_T], str | None], where: Where) -> _T:
    problem = problem_of(value)
    if problem is not None:
        raise where.error(problem, "fix the value or remove the key")
    return value


def _int(node: Node, key: str, source: str) -> int:
    if node.kind == "scalar" and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    raise _at(source, node).error(
        f"{key} must be a whole number, got {_describe(node)}", f"write e.g. {key}: 4"
    )


def _string(node: Node, key: str, source: str) -> str:
    if node.kind == "scalar" and isinstance(node.value, str):
        return node.value
    raise _at(source, node).error(
        f"{key} must be text, got {_describe(node)}", f"write {key} as a string, e.g. {key}: \"x\""
    )


def _get(node: Node, key: str) -> Node | None:
    for k, _, value in node.entries:
        if k == key:
            return value
    return None


def _check_keys(node: Node, allowed: tuple[str, ...], context: str, source: str) -> None:
    seen: set[str] = set()
    for key, key_node, _ in node.entries:
        where = _at(source, key_node)
        if key in seen:
            raise where.error(f"key {key!r} appears twice in {context}", "keep one of them")
        seen.add(key)
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise where.error(
                f"unknown key {key!r} in {context}",
                f"{guess}allowed keys here: {', '.join(allowed)}",
            )


def _expect(node: Node, kind: str, what: str, where: Where) -> None:
    if node.kind != kind:
        shape = {"map": "a mapping (key: value)", "seq": "a list", "scalar": "a value"}[kind]
        raise where.error(f"{what} must be {shape}, got {_describe(node)}", _SCHEMA_HINT)


_SCHEMA_HINT = "see hosts/cluster.yaml for the inventory layout (defaults, groups, hosts)"


def _describe(node: Node) -> str:
    if node.kind == "map":
        return "a mapping"
    if node.kind == "seq":
        return "a list"
    if node.value is None:
        return "nothing (null)"
    return f"{node.value!r} ({type(node.value).__name__})"


def _at(source: str, node: Node) -> Where:
    return Where(source, node.line, node.column)
