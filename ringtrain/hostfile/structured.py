"""YAML and TOML inventories -> positioned ``Node`` trees -> Inventory (via ``schema``). Pure.

YAML positions are exact (PyYAML's composed nodes carry marks). ``tomllib`` reports positions
only for syntax errors, so TOML schema errors are placed by searching the text for the key (and
its value) after the parent's position: best effort, usually the right line.
"""

from __future__ import annotations

import bisect
import re
import sys

import yaml

from ringtrain.hostfile.checks import Where
from ringtrain.hostfile.model import Inventory
from ringtrain.hostfile.schema import Node, build_inventory

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_MAX_DEPTH = 16
_MAX_NODES = 1_000_000  # a YAML bomb stops here; 10,000 hosts with labels are ~150,000
_YAML_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:float",
}
_YAML_COLLECTION_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
# what YAML 1.1 and Python read as the same int (a leading 0 is octal in YAML 1.1, '_' is skipped)
_DECIMAL_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]{0,17})")
_TOML_POS_RE = re.compile(r"\(at line (\d+), column (\d+)\)")
# libyaml's parser when PyYAML was built with it (15x faster on a 1,000-host inventory); the
# same node tree, marks and errors as the pure-Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_HINT = "fix the YAML syntax at that position (indentation, quotes, ':' after keys)"


def parse_yaml_inventory(text: str, source: str) -> Inventory:
    """A YAML (or JSON) inventory in the schema of ``ringtrain.hostfile``."""
    where = Where(source)
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        message = err.problem or err.context or "invalid YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise where.at(line, column).error(message, _YAML_HINT) from None
    except yaml.YAMLError as err:
        raise where.error(f"invalid YAML: {err}", _YAML_HINT) from None
    except RecursionError:
        raise where.error("YAML nested too deeply", "flatten the document") from None
    if root is None:
        raise where.error("the file is empty", "add 'hosts:' or 'groups:' (see hosts/cluster.yaml)")
    return build_inventory(_YamlTree(source).node(root, 0), source, "yaml")


class _YamlTree:
    def __init__(self, source: str) -> None:
        self._source = source
        self._count = 0
        self._constructor = yaml.SafeLoader("")

    def node(self, node: yaml.Node, depth: int) -> Node:
        mark = node.start_mark
        line, column = mark.line + 1, mark.column + 1
        self._count += 1
        if isinstance(node, yaml.ScalarNode):
            return Node("scalar", line, column, value=self._scalar(node, line, column))
        where = Where(self._source, line, column)
        if depth > _MAX_DEPTH or self._count > _MAX_NODES:
            raise where.error("document nested too deeply or too large", "simplify the inventory")
        if node.tag not in _YAML_COLLECTION_TAGS:
            raise where.error(f"YAML tag {node.tag!r} is not supported", "remove the tag")
        if isinstance(node, yaml.MappingNode):
            entries = []
            for key, value in node.value:
                key_node = self.node(key, depth + 1)
                if not isinstance(key_node.value, str):
                    raise where.at(key_node.line, key_node.column).error(
                        f"keys must be text, got {key_node.value!r}", "quote the key"
                    )
                entries.append((key_node.value, key_node, self.node(value, depth + 1)))
            return Node("map", line, column, entries=tuple(entries))
        if isinstance(node, yaml.SequenceNode):
            items = tuple(self.node(item, depth + 1) for item in node.value)
            return Node("seq", line, column, items=items)
        raise where.error(f"YAML node {node.tag!r} is not supported", "remove it")

    def _scalar(self, node: yaml.Node, line: int, column: int) -> object:
        tag = node.tag
        if tag == "tag:yaml.org,2002:str":
            return node.value  # the common cases, without the constructor's bookkeeping
        if tag == "tag:yaml.org,2002:int" and _DECIMAL_RE.fullmatch(node.value):
            return int(node.value)
        where = Where(self._source, line, column)
        if self._count > _MAX_NODES:
            raise where.error("document nested too deeply or too large", "simplify the inventory")
        if tag not in _YAML_SCALAR_TAGS:
            kind = node.tag.rsplit(":", 1)[-1]
            raise where.error(
                f"YAML reads {node.value!r} as type {kind!r}, which an inventory cannot use",
                "quote the value to make it text, and remove any !!tag",
            )
        try:
            return self._constructor.construct_object(node)
        except (ValueError, yaml.YAMLError) as err:
            raise where.error(f"cannot read value {node.value!r}: {err}", "fix the value") from None


def parse_toml_inventory(text: str, source: str) -> Inventory:
    """A TOML inventory in the schema of ``ringtrain.hostfile``."""
    where = Where(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = str(err)
        m = _TOML_POS_RE.search(message)
        at = where.at(int(m.group(1)), int(m.group(2))) if m else where
        if "(at end of document)" in message:
            at = where.at(text.count("\n") + 1, None)
        detail = _TOML_POS_RE.sub("", message).replace("(at end of document)", "").strip()
        raise at.error(f"invalid TOML: {detail}", "fix the TOML syntax at that position") from None
    except RecursionError:
        raise where.error("TOML nested too deeply", "flatten the document") from None
    if not data:
        raise where.error("the file is empty", "add [groups.NAME] tables or hosts (see hosts/)")
    return build_inventory(_TomlTree(text).node(data, 0, 0), source, "toml")


class _TomlTree:
    """Builds Nodes from tomllib's values, finding positions by searching the text."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def node(self, value: object, offset: int, depth: int) -> Node:
        line, column = self._position(offset)
        if depth > _MAX_DEPTH:
            return Node("scalar", line, column, value=None)
        if isinstance(value, dict):
            entries = []
            for key, child in value.items():
                key_at = self._find_key(str(key), child, offset)
                key_line, key_col = self._position(key_at)
                key_node = Node("scalar", key_line, key_col, value=str(key))
                entries.append((str(key), key_node, self.node(child, key_at, depth + 1)))
            return Node("map", line, column, entries=tuple(entries))
        if isinstance(value, list):
            items = []
            cursor = self._starts[self._position(offset)[0] - 1]  # [[hosts]] opens its own line
            for item in value:
                cursor = self._find_item(item, cursor)
                items.append(self.node(item, cursor, depth + 1))
                cursor += 1
            return Node("seq", line, column, items=tuple(items))
        return Node("scalar", line, column, value=value)

    def _position(self, offset: int) -> tuple[int, int]:
        index = bisect.bisect_right(self._starts, offset) - 1
        return index + 1, offset - self._starts[index] + 1

    def _find_key(self, key: str, value: object, start: int) -> int:
        key_re = rf"""(?<![\w"'-])(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
        patterns = [rf"{key_re}\s*[=\].]"]
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            shown = f"[\"']{re.escape(value)}[\"']" if isinstance(value, str) else str(value)
            patterns.insert(0, rf"{key_re}\s*=\s*{shown}")
        for pattern in patterns:
            found = re.compile(pattern).search(self._text, start) or re.search(pattern, self._text)
            if found is not None:
                return found.start()
        return start

    def _find_item(self, item: object, start: int) -> int:
        if isinstance(item, str):
            pattern = f"[\"']{re.escape(item)}[\"']"
        elif isinstance(item, dict):
            pattern = r"\{|\[\["
        else:
            return start
        found = re.compile(pattern).search(self._text, start)
        return found.start() if found is not None else start
