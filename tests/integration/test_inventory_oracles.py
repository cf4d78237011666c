"""The real tools as oracles for how ringtrain reads inventories.

* Open MPI: every hostfile of tests/unit/test_hostfile_openmpi_corpus.py goes to
  ``mpirun --hostfile F -np N --map-by slot --bind-to none --display-map --do-not-launch``
  (nothing starts); every rank's node in its map is compared with ringtrain's placement for the
  same file and -np (``ringtrain hosts F -np N``: the detected format, and forced openmpi), for
  N = 1, all slots but one, all slots, and one more than all (both must refuse that). The
  hostfile ringtrain writes for mpirun from its allocation goes through mpirun too, and must
  put every rank where ringtrain's allocation says.
* Slurm: every host list of tests/unit/test_hostfile_nodelist_corpus.py goes to
  ``scontrol show hostnames`` (a throwaway slurm.conf; no cluster is needed) and is compared,
  name by name and in order, with ringtrain's reading.

Each corpus also records what the tool did when it was written; a change in the tool shows up
here as a mismatch with the record, not only with ringtrain.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrain.errors import AllocationError, InventoryError
from ringtrain.hostfile import allocate, load_inventory, render_openmpi_hostfile
from tests.unit.test_hostfile_nodelist_corpus import CORPUS as LISTS
from tests.unit.test_hostfile_nodelist_corpus import ListCase, expected_names, ringtrain_names
from tests.unit.test_hostfile_openmpi_corpus import (
    ACCEPTS,
    CORPUS,
    REFUSES,
    SAME,
    Case,
    canonical,
    expected_ranks,
    ranks_of,
    ringtrain_ranks,
)

pytestmark = [pytest.mark.slow, pytest.mark.mpi]

_NODE_RE = re.compile(r"Data for node: (?P<node>\S+)\s+Num slots: (?P<slots>\d+)")
_RANK_RE = re.compile(r"Process rank: (?P<rank>\d+)")


def _openmpi_version() -> str | None:
    if shutil.which("mpirun") is None:
        return None
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30,
                         check=False).stdout
    m = re.search(r"\(Open MPI\) (\S+)", out)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def mpirun_env() -> dict[str, str]:
    version = _openmpi_version()
    if version is None or not version.startswith("4."):
        pytest.skip(f"needs Open MPI 4.x mpirun (found {version or 'none'})")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "0"  # the default, whatever a user's config says
    env["RES_OPTIONS"] = "timeout:1 attempts:1"  # .invalid names must not stall on DNS
    return env


def openmpi_ranks(path: Path, np: int, env: dict[str, str]) -> list[str] | str:
    """Every rank's node in mpirun's map (names as ``canonical`` writes them), or, when mpirun
    makes no map, the first lines of what it said instead."""
    proc = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--hostfile", str(path), "-np", str(np),
         "--map-by", "slot", "--bind-to", "none", "--display-map", "--do-not-launch",
         "hostname"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    out = proc.stdout + proc.stderr
    if "JOB MAP" not in out:
        said = [line.strip() for line in out.splitlines() if line.strip().strip("-")]
        return " / ".join(said[:3]) or f"mpirun exited {proc.returncode} without a map"
    ranks: dict[int, str] = {}
    node = ""
    for line in out.splitlines():
        if (m := _NODE_RE.search(line)) is not None:
            node = _local_as_localhost(m.group("node"))
        elif (m := _RANK_RE.search(line)) is not None:
            ranks[int(m.group("rank"))] = node
    assert sorted(ranks) == list(range(np)), out
    return [ranks[r] for r in range(np)]


def _local_as_localhost(node: str) -> str:
    """mpirun names the launching machine by its host name; the corpus says localhost."""
    own = socket.gethostname()
    return "localhost" if node in (own, own.split(".", 1)[0]) else canonical(node)


def _ringtrain(path: Path, np: int, fmt: str | None) -> list[str] | str:
    try:
        return ringtrain_ranks(str(path), np, fmt)
    except (InventoryError, AllocationError) as err:
        return f"refused: {err}"


def _nps(total: int) -> Iterator[int]:
    yield from sorted({1, max(1, total - 1), total})


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_openmpi_hostfile_against_mpirun(case: Case, tmp_path: Path, mpirun_env):
    path = tmp_path / "hostfile"
    path.write_bytes(case.text.encode())
    if case.openmpi is None:
        said = openmpi_ranks(path, 1, mpirun_env)
        assert isinstance(said, str), f"mpirun now reads {case.name}: {said}"
    else:
        total = sum(slots for _, slots in case.openmpi)
        assert openmpi_ranks(path, total, mpirun_env) == ranks_of(case.openmpi)
        assert isinstance(openmpi_ranks(path, total + 1, mpirun_env), str)  # no more slots
    for fmt in (None, "openmpi"):
        expected = expected_ranks(case, detected=fmt is None)
        if expected is None:
            assert _ringtrain(path, 1, fmt).startswith("refused: "), (case.name, fmt)
            continue
        if case.ringtrain == SAME and case.detected is None:
            for np in _nps(len(expected)):
                assert _ringtrain(path, np, fmt) == openmpi_ranks(path, np, mpirun_env), (
                    case.name, fmt, np)
        assert _ringtrain(path, len(expected), fmt) == expected
        assert _ringtrain(path, len(expected) + 1, fmt).startswith("refused: ")
    _check_written_hostfile(path, tmp_path / "written", mpirun_env)


def _check_written_hostfile(path: Path, written: Path, env: dict[str, str]) -> None:
    """The hostfile a launch writes for mpirun puts every rank where ringtrain's plan says."""
    try:
        inventory = load_inventory(str(path))
    except InventoryError:
        return
    for np in _nps(inventory.total_slots):
        alloc = allocate(inventory, np)
        written.write_text(render_openmpi_hostfile(alloc.hosts))
        assert openmpi_ranks(written, np, env) == [canonical(r.host) for r in alloc.ranks]


def test_openmpi_corpus_covers_every_kind():
    kinds = {c.ringtrain for c in CORPUS}
    assert kinds == {SAME, REFUSES, ACCEPTS}
    assert sum(c.ringtrain == SAME and c.openmpi is not None for c in CORPUS) >= 15


@pytest.fixture(scope="module")
def scontrol_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("scontrol") is None:
        pytest.skip("needs Slurm's scontrol")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    # all that `scontrol show hostnames` needs: it parses the file but contacts nothing
    conf.write_text("ClusterName=oracle\nSlurmctldHost=localhost\n")
    return {**os.environ, "SLURM_CONF": str(conf)}


def scontrol_names(expr: str, env: dict[str, str]) -> tuple[str, ...] | None:
    proc = subprocess.run(["scontrol", "show", "hostnames", expr], capture_output=True,
                          text=True, timeout=60, env=env, check=False)
    if proc.returncode != 0 or "Invalid" in proc.stderr:
        return None
    return tuple(proc.stdout.split())


@pytest.mark.parametrize("case", LISTS, ids=lambda c: c.expr)
def test_slurm_host_list_against_scontrol(case: ListCase, scontrol_env):
    slurm = scontrol_names(case.expr, scontrol_env)
    assert slurm == case.slurm
    expected = expected_names(case)
    try:
        ours: tuple[str, ...] | None = ringtrain_names(case.expr)
    except InventoryError:
        ours = None
    assert ours == expected
    if case.ringtrain == SAME:
        assert ours == slurm
