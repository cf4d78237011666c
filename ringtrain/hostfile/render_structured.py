"""YAML and TOML renderers for inventories, in the schema ``structured.py`` reads. Pure.

Every host is written out in full (no ``defaults``), so the output reads back to the same
hosts. Sections follow the inventory: groups in order of their first host, ungrouped hosts
under top-level ``hosts`` before or after the groups, whichever the first host needs.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from ringtrain.hostfile.model import Host, Inventory

_HEADER = "# ringtrain inventory: hosts in ring order; see ringtrain/hostfile/__init__.py\n"


def _host_entry(host: Host) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": host.name, "slots": host.slots}
    for key in ("max_slots", "user", "port", "identity_file"):
        value = getattr(host, key)
        if value is not None:
            entry[key] = value
    if host.labels:
        entry["labels"] = dict(host.labels)
    return entry


def _sections(inventory: Inventory) -> tuple[bool, list[tuple[str, list[Host]]], list[Host]]:
    """(ungrouped first?, [(group, hosts)], ungrouped hosts)."""
    grouped: dict[str, list[Host]] = {}
    loose: list[Host] = []
    for host in inventory.hosts:
        group = inventory.group_of(host.name)
        if group is None:
            loose.append(host)
        else:
            grouped.setdefault(group, []).append(host)
    loose_first = bool(inventory.hosts) and inventory.group_of(inventory.hosts[0].name) is None
    return loose_first, list(grouped.items()), loose


def render_yaml_inventory(inventory: Inventory) -> str:
    loose_first, groups, loose = _sections(inventory)
    doc: dict[str, Any] = {}
    if loose and loose_first:
        doc["hosts"] = [_host_entry(h) for h in loose]
    if groups:
        doc["groups"] = {g: {"hosts": [_host_entry(h) for h in hs]} for g, hs in groups}
    if loose and not loose_first:
        doc["hosts"] = [_host_entry(h) for h in loose]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, allow_unicode=True)
    return _HEADER + body


def render_toml_inventory(inventory: Inventory) -> str:
    loose_first, groups, loose = _sections(inventory)
    parts = [_HEADER]
    if loose and loose_first:
        parts.extend(_toml_array_tables("hosts", loose))
    for group, hosts in groups:
        parts.append(f"\n[groups.{_toml_str(group)}]\nhosts = [\n")
        parts.extend(f"  {_toml_inline(_host_entry(h))},\n" for h in hosts)
        parts.append("]\n")
    if loose and not loose_first:
        parts.extend(_toml_array_tables("hosts", loose))
    return "".join(parts)


def _toml_array_tables(key: str, hosts: list[Host]) -> list[str]:
    out = []
    for host in hosts:
        body = "".join(f"{k} = {_toml_value(v)}\n" for k, v in _host_entry(host).items())
        out.append(f"\n[[{key}]]\n{body}")
    return out


def _toml_inline(entry: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()) + " }"


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return _toml_inline(value)
    if isinstance(value, int):
        return str(value)
    return _toml_str(str(value))


def _toml_key(key: str) -> str:
    bare = key.isascii() and key.replace("_", "a").replace("-", "a").isalnum()
    return key if bare else _toml_str(key)


def _toml_str(text: str) -> str:
    # JSON string escapes (\" \\ \n \t \uXXXX) are all valid TOML basic-string escapes.
    return json.dumps(text, ensure_ascii=False)
