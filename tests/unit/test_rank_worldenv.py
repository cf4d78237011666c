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


def test_srun_local_world_size_is_this_nodes_count_in_the_step() -> None:
    """As the test cluster's srun set them (tests/integration/test_slurm_launch.py): a step of
    3 tasks on 2 nodes has SLURM_STEP_TASKS_PER_NODE=2,1 on both, SLURM_NODEID 0 or 1; the
    batch job's SLURM_NTASKS_PER_NODE=2 reaches the step unchanged and is not it."""
    step = {"SLURM_PROCID": "2", "SLURM_NTASKS": "3", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_NTASKS_PER_NODE": "2"}
    assert torch_style(step)["LOCAL_WORLD_SIZE"] == "1"
    assert torch_style({**step, "SLURM_NODEID": "0"})["LOCAL_WORLD_SIZE"] == "2"
    many = {**step, "SLURM_STEP_TASKS_PER_NODE": "4(x3),2", "SLURM_NODEID": "3"}
    assert torch_style(many)["LOCAL_WORLD_SIZE"] == "2"
    assert torch_style({**many, "SLURM_NODEID": "2"})["LOCAL_WORLD_SIZE"] == "4"
    older = {k: v for k, v in step.items() if k != "SLURM_STEP_TASKS_PER_NODE"}
    assert torch_style({**older, "SLURM_TASKS_PER_NODE": "2,1"})["LOCAL_WORLD_SIZE"] == "1"
    for broken in ({"SLURM_STEP_TASKS_PER_NODE": "2(x"}, {"SLURM_NODEID": "5"},
                   {"SLURM_NODEID": ""}):
        assert "LOCAL_WORLD_SIZE" not in torch_style({**step, **broken})


def test_a_local_size_the_launcher_does_not_tell_is_not_left_from_the_shell() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
           "LOCAL_WORLD_SIZE": "8"}  # a torchrun job's, in the shell that ran ringtrain
    apply(env)
    assert "LOCAL_WORLD_SIZE" not in env and env["RANK"] == "0"
