"""Host inventories: model, parsers, validation, allocation and renderers. Pure but for ``load``.

Sources (``load_inventory(path, fmt)``; ``fmt`` is detected when not given):

============  ==============================================================================
openmpi       ``[user@]gpu01 slots=4 max_slots=8`` per line, read as Open MPI 4.1 reads it
              (openmpi.py: comments, repeated lines, key spellings)
mpich         MPICH / Intel MPI machinefile: ``gpu01:4`` per line (IPv6: ``[fd00::1]:4``)
horovod       horovodrun ``-H`` text: ``gpu01:4,gpu02:4`` (``localhost:0``: listed, no rank)
nodelist      Slurm host lists: ``gpu[01-04,07]:4 cpu01`` (commas, spaces or newlines),
              expanded as ``scontrol show hostnames`` does (nodeset.py)
pbs           PBS_NODEFILE: one host name per process; repeats are slots, first-seen order
yaml, toml    the schema below (``.yaml``/``.yml``/``.json``, ``.toml``)
script        an executable printing ``host[:slots]`` lines (run with a timeout)
============  ==============================================================================

Host names may be names, FQDNs, IPv4 or IPv6 addresses. Anything else (spaces, shell
metacharacters, a leading ``-``) is refused with an ``InventoryError`` naming the source, line
and column, as are duplicate hosts (but repeated lines of an Open MPI hostfile or PBS nodefile,
which add slots), slots below 1 (but ``-H host:0``) and unknown keys.

YAML / TOML schema (every key optional except a host's ``name``; hosts keep document order)::

    defaults:                      # applies to every host
      user: ubuntu                 # SSH user
      port: 22                     # SSH port
      identity_file: ~/.ssh/id_ed25519
      slots: 4                     # ranks per host (one per GPU); default 1
      max_slots: 8                 # hard limit for oversubscription
      labels: {gpu: v100}          # any key=value; values are text or whole numbers
    groups:                        # named groups; their settings apply to their hosts
      rack1:
        labels: {rack: r1}         # merged key by key over defaults.labels
        hosts:
          - gpu[01-02]             # a name, an address, or a Slurm host list
          - {name: gpu03, slots: 8, labels: {gpu: a100}}   # a host with its own settings
    hosts:                         # hosts outside any group
      - name: 10.0.0.7
        user: admin

A host entry's keys are ``name`` plus the ``defaults`` keys; a group's are the ``defaults`` keys
plus ``hosts``. Precedence: host over group over defaults. In TOML the same tree is written
``[defaults]``, ``[groups.rack1]`` with ``hosts = [...]`` (strings or inline tables), and
``[[hosts]]`` tables. See ``hosts/`` for one example of every format.
"""

from ringtrain.hostfile.allocate import (
    Allocation,
    AllocationPolicy,
    RankAssignment,
    allocate,
    placement_only,
    select,
    with_extra_slots,
)
from ringtrain.hostfile.load import (
    FORMATS,
    detect_format,
    load_inventory,
    parse_inventory_text,
    resolve_hosts,
)
from ringtrain.hostfile.model import Host, Inventory, host_name_problem
from ringtrain.hostfile.parse import (
    parse_host_spec,
    parse_mpich_machinefile,
    parse_nodelist,
    parse_openmpi_hostfile,
    parse_pbs_nodefile,
    parse_slurm_env,
)
from ringtrain.hostfile.render import (
    RENDER_FORMATS,
    allocation_to_dict,
    inventory_to_dict,
    render_horovod_hosts,
    render_inventory,
    render_json,
    render_mpich_machinefile,
    render_nodelist,
    render_openmpi_hostfile,
    render_pbs_nodefile,
)
from ringtrain.hostfile.structured import parse_toml_inventory, parse_yaml_inventory

__all__ = [
    "FORMATS",
    "RENDER_FORMATS",
    "Allocation",
    "AllocationPolicy",
    "Host",
    "Inventory",
    "RankAssignment",
    "allocate",
    "allocation_to_dict",
    "detect_format",
    "host_name_problem",
    "inventory_to_dict",
    "load_inventory",
    "parse_host_spec",
    "parse_inventory_text",
    "parse_mpich_machinefile",
    "parse_nodelist",
    "parse_openmpi_hostfile",
    "parse_pbs_nodefile",
    "parse_slurm_env",
    "parse_toml_inventory",
    "parse_yaml_inventory",
    "placement_only",
    "render_horovod_hosts",
    "render_inventory",
    "render_json",
    "render_mpich_machinefile",
    "render_nodelist",
    "render_openmpi_hostfile",
    "render_pbs_nodefile",
    "resolve_hosts",
    "select",
    "with_extra_slots",
]
