"""RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE on every rank (issue 27), from what mpirun,
horovodrun --gloo or srun told the rank."""

from __future__ import annotations

from ringtrain.rank.worldenv import apply, torch_style


def test_from_each_launcher() -> None:
    mpirun = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
              "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert torch_style(mpirun) == {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
                                   "LOCAL_WORLD_SIZE": "2"}
    gloo = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1",
            "HOROVOD_LOCAL_SIZE": "2"}
    assert torch_style(gloo)["WORLD_SIZE"] == "2"
    srun = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}
    assert torch_style(srun) == {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "1"}
    assert torch_style({"PATH": "/usr/bin"}) == {}


def test_a_rank_left_in_the_launchers_shell_does_not_reach_every_rank() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "7"}
    apply(env)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    untouched = {"RANK": "7"}  # not started by a launcher ringtrain knows: left alone
    apply(untouched)
    assert untouched == {"RANK": "7"}
