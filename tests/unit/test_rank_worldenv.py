"""RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE on every rank (issue 27), from what mpirun,
horovodrun --gloo or srun told the rank; a value the user set wins."""

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


def test_a_value_the_user_set_wins() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "7"}
    apply(env)
    assert env["RANK"] == "7" and env["WORLD_SIZE"] == "2"
