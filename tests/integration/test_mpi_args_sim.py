"""Issue 42: the user's own MCA parameters, with the real mpirun as the oracle.

Open MPI 4.1's mpirun refuses a parameter named twice on its command line, and puts the command
line over ``OMPI_MCA_*`` in the environment. ringtrain's own pairs (``pml``, ``btl``, the probe's
``btl_tcp_if_include``...) give way to the user's and the site's (launch/plan/mca.py); under
horovodrun, whose own ``-mca`` cannot be left out, the user's go as ``-gmca``.

Each launch here runs two simulated hosts through ``ringtrain launch`` and the real mpirun (or
horovodrun and its mpirun). The rank is an mpi4py program: an all-reduce across the two hosts
(the transport the user chose works), and Open MPI's own view of its parameters: rank 0's
``mpi_show_mca_params`` lines, printed by Open MPI's MCA system inside MPI_Init with the value
in force (a subnet in ``btl_tcp_if_include`` shows as the interface the tcp BTL resolved it
to), and each rank's ``OMPI_MCA_*`` as mpirun set them on its host. The user's ``btl
self,tcp`` differs from ringtrain's and horovodrun's ``^openib``: it shows whose value is in
force; for the other names, being taken at all is the proof (named twice, mpirun stops)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrain import sim
from tests.integration.simnames import G1, G2

pytestmark = [pytest.mark.slow, pytest.mark.mpi]
REPO = Path(__file__).resolve().parents[2]
RINGTRAIN = [sys.executable, "-m", "ringtrain"]
SHOWN = ("pml", "btl", "btl_tcp_if_include")  # the ranks' (oob_tcp: the daemons')

RANK = f"""\
import json, os, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1)
mca = {{k[9:]: v for k, v in os.environ.items()
       if k.startswith("OMPI_MCA_") and k[9:] in {SHOWN!r}}}
print("MCA", comm.rank, socket.gethostname(), total, json.dumps(mca, sort_keys=True), flush=True)
"""
SHOW = ("-mca", "mpi_show_mca_params", "enviro")  # rank 0 prints its parameters in MPI_Init
_SHOWN_RE = re.compile(r"\[[^]\s]+:\d+\] (\w+)=(\S*) \((\w+)\)")


def _wrapped(tmp_path: Path) -> Path:
    """The Python on the hosts (ranks, ringtrain's helpers): this checkout's code; horovodrun
    beside it, as ringtrain finds it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "horovodrun").symlink_to(Path(sys.executable).parent / "horovodrun")
    (tmp_path / "rank.py").write_text(RANK)
    return bin_dir / "python"


def _argv(cluster: sim.SimCluster, tmp_path: Path, *args: str) -> list[str]:
    return [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"),
            "-H", f"{G1}:1,{G2}:1", "--python", str(_wrapped(tmp_path)),
            "--ssh-config", str(cluster.ssh_config), "--known-hosts", str(cluster.known_hosts),
            *args, str(tmp_path / "rank.py")]


def _this_checkout(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(
        filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}


def _open_mpis_view(done: subprocess.CompletedProcess[str]) -> tuple[dict[str, str],
                                                                     dict[str, list[str]]]:
    """(rank 0's parameters as its MCA system resolved them, each rank's host, all-reduce
    and OMPI_MCA_* as Open MPI set them there)."""
    out = done.stdout + done.stderr
    shown = {m.group(1): m.group(2) for m in _SHOWN_RE.finditer(out)}
    ranks = {}
    for line in out.splitlines():
        words = line.split(" MCA ", 1)
        if len(words) == 2 and words[1][:1].isdigit():
            rank, host, total, mca = words[1].split(" ", 3)
            ranks[rank] = [host, total, mca]
    return shown, ranks


def _plan_argv(tmp_path: Path) -> list[str]:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return list(json.loads((run_dir / "attempt-1" / "plan.json").read_text())["argv"])


def _mca_names(argv: list[str], option: str = "-mca") -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-2]) if a == option]


def _launch(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_this_checkout(env), capture_output=True,
                          text=True, timeout=240, check=False)



def _in_force_everywhere(done: subprocess.CompletedProcess[str]) -> None:
    """The job ran, and Open MPI says ``pml ob1``, ``btl self,tcp`` and the include ``eth0``
    are in force, on both hosts' ranks alike."""
    out = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, out
    shown, ranks = _open_mpis_view(done)
    assert {k: shown.get(k) for k in SHOWN} == {
        "pml": "ob1", "btl": "self,tcp", "btl_tcp_if_include": "eth0"}, out
    mca = json.dumps({"btl": "self,tcp", "btl_tcp_if_include": "eth0", "pml": "ob1"},
                     sort_keys=True)
    assert ranks == {"0": [G1, "3", mca], "1": [G2, "3", mca]}, out

@pytest.mark.ssh
def test_the_users_mca_words_are_accepted_and_in_force(sim_cluster: sim.SimCluster,
                                                       tmp_path: Path) -> None:
    """The issue's own: ``-mca pml ob1`` and ``-mca btl_tcp_if_include <the sim's interface>``
    (and ``btl``) beside ringtrain's defaults stopped mpirun ("can only be listed once")."""
    words = ["-mca", "pml", "ob1", "-mca", "btl", "self,tcp", "-mca", "btl_tcp_if_include",
             "eth0", *SHOW]
    done = _launch(_argv(sim_cluster, tmp_path, "--mpi-args", shlex.join(words)), {}, tmp_path)
    _in_force_everywhere(done)
    argv = _plan_argv(tmp_path)
    names = _mca_names(argv)
    assert sorted(names) == sorted(set(names)), argv  # as mpirun itself checked
    # the daemons' network stays the probe's, where the user set none
    assert argv[argv.index("oob_tcp_if_include") + 1] == sim_cluster.subnet
    assert ("MCA settings of yours in force, ringtrain's left out: pml ob1 (--mpi-arg -mca "
            "pml ob1); btl ^openib (--mpi-arg -mca btl self,tcp); btl_tcp_if_include "
            f"{sim_cluster.subnet} (--mpi-arg -mca btl_tcp_if_include eth0)") in done.stderr


@pytest.mark.ssh
def test_a_sites_mca_environment_wins_over_ringtrains_defaults(sim_cluster: sim.SimCluster,
                                                               tmp_path: Path) -> None:
    """``OMPI_MCA_btl`` and ``OMPI_MCA_btl_tcp_if_include`` in the launcher's environment, as a
    site sets them: ringtrain's -mca would have overridden them (the command line wins); left
    out, mpirun carries the environment's to the other host's ranks."""
    env = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "eth0"}
    done = _launch(_argv(sim_cluster, tmp_path, "--mpi-args", shlex.join(SHOW)), env, tmp_path)
    _in_force_everywhere(done)
    assert "btl" not in _mca_names(_plan_argv(tmp_path))


@pytest.mark.ssh
@pytest.mark.parametrize("args", [
    ["--mpi-args", "-mca btl ^openib"],  # README's and horovodrun's
    ["--mpi-arg=-mca", "--mpi-arg=btl_tcp_if_exclude", "--mpi-arg=docker0,lo"],  # --help's
], ids=["readme", "help"])
def test_the_documented_examples_run(sim_cluster: sim.SimCluster, tmp_path: Path,
                                     args: list[str]) -> None:
    done = _launch(_argv(sim_cluster, tmp_path, *args, "--mpi-args", shlex.join(SHOW)), {},
                   tmp_path)
    out = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, out
    shown, ranks = _open_mpis_view(done)
    assert [ranks[r][:2] for r in ("0", "1")] == [[G1, "3"], [G2, "3"]], out
    if "^openib" in args[1]:  # and the probe's subnet, as Open MPI's tcp BTL names it
        assert (shown["btl"], shown["btl_tcp_if_include"]) == ("^openib", "eth0"), out
    else:
        assert shown["btl_tcp_if_exclude"] == "docker0,lo" and "btl_tcp_if_include" not in shown


@pytest.mark.ssh
def test_horovodrun_takes_the_users_and_the_sites_mca_over_its_own(
        sim_cluster: sim.SimCluster, tmp_path: Path) -> None:
    """horovodrun --mpi passes ``-mca pml ob1 -mca btl ^openib -mca btl_tcp_if_include eth0``
    (its own interface search) before the user's words: the user's -mca of those goes as
    -gmca, the site's OMPI_MCA_btl too, and Open MPI takes theirs. Run from gpu01, as
    horovodrun is run from a node of the cluster (its driver's address is on eth0)."""
    words = ["-mca", "pml", "ob1", "-mca", "btl_tcp_if_include", sim_cluster.subnet, *SHOW]
    argv = _argv(sim_cluster, tmp_path, "--backend", "horovodrun", "--mpi-args",
                 shlex.join(words))
    env = {"OMPI_MCA_btl": "self,tcp", "PYTHONPATH": str(REPO)}
    remote = f"cd {shlex.quote(str(tmp_path))} && " + shlex.join(["env", *(
        f"{k}={v}" for k, v in env.items()), *argv])
    done = subprocess.run(sim_cluster.ssh_argv(G1, remote), capture_output=True, text=True,
                          timeout=240, check=False)
    out = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, out
    shown, ranks = _open_mpis_view(done)
    # the subnet as Open MPI's tcp BTL resolves it: its interface (horovodrun's own value
    # too, so the user's word shows its force in being taken: named twice, mpirun stops)
    assert {k: shown.get(k) for k in SHOWN} == {
        "pml": "ob1", "btl": "self,tcp", "btl_tcp_if_include": "eth0"}, out
    assert [ranks[r][:2] for r in ("0", "1")] == [[G1, "3"], [G2, "3"]], out
    for rank in ("0", "1"):
        seen = json.loads(ranks[rank][2])
        assert (seen["btl"], seen["btl_tcp_if_include"]) == ("self,tcp", sim_cluster.subnet)
    hvd_words = shlex.split(_plan_argv(tmp_path)[_plan_argv(tmp_path).index("--mpi-args") + 1])
    assert _mca_names(hvd_words, "-gmca") == ["pml", "btl_tcp_if_include", "btl"]


def test_open_mpis_precedence_as_ringtrain_relies_on_it() -> None:
    """The premises of launch/plan/mca.py, asked of this machine's mpirun (one local rank, its MCA
    system's own view in MPI_Init): a name twice is refused; the command line wins over the
    environment; -mca and -gmca of one name are taken, -gmca's in force, in either order;
    a variable forwarded by name (horovodrun's -x for its whole environment) loses to -mca."""
    def in_force(*args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["mpirun", *(["--allow-run-as-root"] if os.geteuid() == 0 else []), "-np", "1",
             *SHOW, *args, sys.executable, "-c", "from mpi4py import MPI"],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, **(env or {})})
        shown = {m.group(1): m.group(2) for m in _SHOWN_RE.finditer(done.stderr)}
        return shown.get("btl", "") if done.returncode == 0 else " ".join(done.stderr.split())

    assert "can only be listed once" in in_force("-mca", "btl", "self", "--mca", "btl", "self")
    assert in_force("-mca", "btl", "self,tcp", env={"OMPI_MCA_btl": "self,vader"}) == "self,tcp"
    assert in_force("-mca", "btl", "self,vader", "-gmca", "btl", "self,tcp") == "self,tcp"
    assert in_force("-gmca", "btl", "self,tcp", "-mca", "btl", "self,vader") == "self,tcp"
    assert in_force("-mca", "btl", "self,tcp", "-x", "OMPI_MCA_btl",
                    env={"OMPI_MCA_btl": "self,vader"}) == "self,tcp"
