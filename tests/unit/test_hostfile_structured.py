"""YAML and TOML inventories: the schema, precedence, and errors with line and column."""

from __future__ import annotations

import textwrap

import pytest

from ringtrain.errors import InventoryError
from ringtrain.hostfile import Host, parse_toml_inventory, parse_yaml_inventory

YAML = """\
defaults:
  user: train
  slots: 4
  labels: {gpu: v100, site: ams}
groups:
  rack1:
    labels: {rack: r1}
    port: 2222
    hosts:
      - gpu[01-02]
      - {name: gpu03, slots: 8, labels: {gpu: a100}, identity_file: ~/.ssh/k}
  rack2:
    labels: {rack: 2}
    hosts: [gpu04]
hosts:
  - name: fd00::1
    user: root
    max_slots: 6
"""

TOML = """\
[defaults]
user = "train"
slots = 4
labels = { gpu = "v100", site = "ams" }

[groups.rack1]
labels = { rack = "r1" }
port = 2222
hosts = [
  "gpu[01-02]",
  { name = "gpu03", slots = 8, labels = { gpu = "a100" }, identity_file = "~/.ssh/k" },
]

[groups.rack2]
labels = { rack = 2 }
hosts = ["gpu04"]

[[hosts]]
name = "fd00::1"
user = "root"
max_slots = 6
"""

EXPECTED = (
    Host("gpu01", 4, labels=(("gpu", "v100"), ("site", "ams"), ("rack", "r1")), user="train",
         port=2222),
    Host("gpu02", 4, labels=(("gpu", "v100"), ("site", "ams"), ("rack", "r1")), user="train",
         port=2222),
    Host("gpu03", 8, labels=(("gpu", "a100"), ("site", "ams"), ("rack", "r1")), user="train",
         port=2222, identity_file="~/.ssh/k"),
    Host("gpu04", 4, labels=(("gpu", "v100"), ("site", "ams"), ("rack", "2")), user="train"),
    Host("fd00::1", 4, max_slots=6, labels=(("gpu", "v100"), ("site", "ams")), user="root"),
)


@pytest.mark.parametrize("parse,text", [(parse_yaml_inventory, YAML), (parse_toml_inventory, TOML)])
def test_schema_precedence_groups_and_order(parse, text):
    inv = parse(text, "inv")
    assert inv.hosts == EXPECTED
    assert inv.groups == (("rack1", ("gpu01", "gpu02", "gpu03")), ("rack2", ("gpu04",)))
    assert inv.group_of("gpu03") == "rack1" and inv.group_of("fd00::1") is None


def test_yaml_hosts_keep_document_order():
    inv = parse_yaml_inventory("hosts: [b1]\ngroups:\n  g: {hosts: [a1]}\n", "y")
    assert inv.names == ("b1", "a1")


def test_json_is_read_as_yaml():
    inv = parse_yaml_inventory('{"hosts": [{"name": "gpu01", "slots": 2}]}', "inv.json")
    assert inv.hosts == (Host("gpu01", 2),)


def _yaml_error(text):
    with pytest.raises(InventoryError) as info:
        parse_yaml_inventory(textwrap.dedent(text), "inv.yaml")
    return info.value


@pytest.mark.parametrize(
    ("text", "line", "token", "words"),
    [
        ("hosts:\n  - name: a\n    slot: 4\n", 3, "slot", ["unknown key 'slot'", "mean 'slots'"]),
        ("groups:\n  r1:\n    host: [a]\n", 3, "host", ["unknown key 'host'"]),
        ("defaults:\n  hosts: [a]\n", 2, "hosts", ["unknown key 'hosts' in defaults"]),
        ("nodes: [a]\n", 1, "nodes", ["unknown key 'nodes'"]),
        ("hosts:\n  - a\n  - b\n  - a\n", 4, "a", ["listed twice", "line 2, column 5"]),
        ("hosts:\n  - {name: a, slots: 0}\n", 2, "0", ["at least 1"]),
        ("hosts:\n  - {name: a, slots: four}\n", 2, "four", ["whole number"]),
        ("hosts:\n  - {name: a, slots: true}\n", 2, "true", ["whole number"]),
        ("hosts:\n  - {name: 'a b'}\n", 2, "'a b'", ["' '"]),
        ("hosts:\n  - 'gpu;reboot'\n", 2, "'gpu", ["';'"]),
        ("hosts:\n  - {name: a, port: 70000}\n", 2, "70000", ["outside 1-65535"]),
        ("hosts:\n  - {name: a, user: 'x y'}\n", 2, "'x y'", ["not a valid user"]),
        ("hosts:\n  - {name: a, labels: {rack: [1]}}\n", 2, "[1]", ["text or a whole number"]),
        ("hosts:\n  - {name: a, labels: {'ra ck': r1}}\n", 2, "'ra ck'", ["label key"]),
        ("hosts:\n  - {name: a, labels: {rack: yes}}\n", 2, "yes", ["True", "quote"]),
        ("hosts:\n  - {slots: 2}\n", 2, "{", ["no name"]),
        ("hosts:\n  - 12\n", 2, "12", ["name or a mapping"]),
        ("hosts:\n  - gpu[3-1]\n", 2, "gpu", ["start > stop"]),
        ("groups:\n  r1: {slots: 2}\n", 2, "{", ["no hosts"]),
        ("groups:\n  'r 1': {hosts: [a]}\n", 2, "'r 1'", ["group name"]),
        ("hosts: a\n", 1, "a", ["must be a list"]),
        ("- a\n- b\n", 1, "-", ["must be a mapping"]),
        ("hosts: [a]\nhosts: [b]\n", 2, "hosts", ["appears twice"]),
        ("hosts:\n  - {name: a, identity_file: '-oX=y'}\n", 2, "'-oX", ["option"]),
        ("hosts:\n  - !!python/object:os.system {}\n", 2, "!!", ["not supported"]),
        ("hosts:\n  - {name: a, labels: {d: 2024-01-01}}\n", 2, "2024", ["timestamp", "quote"]),
        ("hosts:\n  - !!python/name:os.system x\n", 2, "!!", ["cannot use"]),
        ("hosts:\n- {name: a, slots: !!int x}\n", 2, "!!int", ["cannot read value"]),
        ("hosts:\n  - a\n bad: 1\n", 3, "bad", []),
    ],
)
def test_yaml_errors_point_at_the_token(text, line, token, words):
    err = _yaml_error(text)
    column = text.splitlines()[line - 1].index(token) + 1
    assert (err.source, err.line, err.column) == ("inv.yaml", line, column)
    for word in words:
        assert word in f"{err.message} {err.hint}"
    assert err.hint


def test_yaml_syntax_and_empty_errors():
    err = _yaml_error("hosts: [a\n")
    assert (err.line, err.column) == (2, 1)
    assert _yaml_error("").line is None
    assert "empty" in _yaml_error("# only a comment\n").message


def test_yaml_alias_bomb_and_deep_nesting_are_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    assert "too large" in _yaml_error(bomb).message
    assert _yaml_error("hosts: " + "[" * 5000 + "]" * 5000 + "\n").message
    assert "a" in _yaml_error("&a [*a]\n").message


def _toml_error(text):
    with pytest.raises(InventoryError) as info:
        parse_toml_inventory(textwrap.dedent(text), "inv.toml")
    return info.value


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[groups.r1]\nhosts = ["a"]\nslot = 2\n', 3, ["unknown key 'slot'"]),
        ('[[hosts]]\nname = "a"\n\n[[hosts]]\nname = "b"\ncolour = "x"\n', 6, ["colour"]),
        ('[[hosts]]\nname = "a"\nslots = 2\n\n[[hosts]]\nname = "b"\nslots = 0\n', 7, ["at least"]),
        ('hosts = ["a", "b;c"]\n', 1, ["';'"]),
        ('[groups.r1]\nhosts = ["a"]\n[groups.r2]\nhosts = ["b", "a"]\n', 4, ["listed twice"]),
        ('hosts = ["a"\n', 2, ["invalid TOML"]),
        ("hosts = 3\n", 1, ["must be a list"]),
        ('[defaults]\nport = "22"\n[[hosts]]\nname = "a"\n', 2, ["whole number"]),
        ("[defaults]\nlabels = { when = 1979-05-27 }\n", 2, ["text or a whole number"]),
    ],
)
def test_toml_errors_find_the_line(text, line, words):
    err = _toml_error(text)
    assert err.source == "inv.toml"
    assert err.line == line
    for word in words:
        assert word in err.message
    assert err.hint


def test_yaml_scalars_read_as_yaml_reads_them():
    """The decimal fast path and the constructor give yaml.safe_load's values and types."""
    import yaml

    from ringtrain.hostfile.schema import Node
    from ringtrain.hostfile.structured import _LOADER, _YamlTree

    def plain(node: Node) -> object:
        if node.kind == "map":
            return {key: plain(value) for key, _, value in node.entries}
        if node.kind == "seq":
            return [plain(item) for item in node.items]
        return node.value

    values = ["7", "+5", "-0", "-12", "00", "012", "0o14", "0x1f", "1_000", "0b101", "1e3",
              "0.5", "yes", "No", "~", "null", "", "12345678901234567890123", "'8'", "+"]
    text = "".join(f"k{i}: {v}\n" for i, v in enumerate(values))
    got = plain(_YamlTree("t.yaml").node(yaml.compose(text, Loader=_LOADER), 0))
    want = yaml.safe_load(text)
    assert got == want
    assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
