"""Scheduler detection and the inventory from a Slurm or PBS job environment (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringtrain.errors import SchedulerError
from ringtrain.schedulers.calls import inventory_from_scheduler
from ringtrain.schedulers.jobenv import (
    Scheduler,
    detect_scheduler,
    gres_gpu_count,
    parse_scontrol_gpus,
    parse_scontrol_node_addrs,
    pbs_job,
    slurm_job,
)
from ringtrain.spec import Backend

FIXTURES = Path(__file__).parent / "golden" / "schedulers"


def _slurm(nodelist: str, tasks: str, **extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": nodelist,
            "SLURM_TASKS_PER_NODE": tasks, **extra}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"SLURM_JOB_ID": "5"}, Scheduler.SLURM),
        ({"SLURM_JOBID": "5"}, Scheduler.SLURM),
        ({"PBS_JOBID": "12.srv"}, Scheduler.PBS),
        ({"PBS_NODEFILE": "/var/spool/pbs/aux/12.srv"}, Scheduler.PBS),
        ({"SLURM_JOB_ID": "5", "PBS_JOBID": "5"}, Scheduler.SLURM),  # PBS shims on Slurm sites
        ({"SLURM_JOB_ID": ""}, None),
    ],
)
def test_detect_scheduler(environ: dict[str, str], expected: Scheduler | None) -> None:
    assert detect_scheduler(environ) is expected


# Forms seen on the live test cluster (tests/integration/test_slurm_cluster.py checks them
# against scontrol show hostnames) plus the classic examples from the sbatch man page.
@pytest.mark.parametrize(
    ("nodelist", "tasks", "expected"),
    [
        ("gpu[01-02]", "2(x2)", [("gpu01", 2), ("gpu02", 2)]),
        ("gpu[01-03]", "5,1(x2)", [("gpu01", 5), ("gpu02", 1), ("gpu03", 1)]),
        ("gpu[01,03-04]", "1(x3)", [("gpu01", 1), ("gpu03", 1), ("gpu04", 1)]),
        ("gpu[01-04]", "1,6,2,1", [("gpu01", 1), ("gpu02", 6), ("gpu03", 2), ("gpu04", 1)]),
        ("gpu[02,04]", "3(x2)", [("gpu02", 3), ("gpu04", 3)]),
        ("gpu01", "8", [("gpu01", 8)]),
        ("tux[1-3],gpu7", "2(x3),1", [("tux1", 2), ("tux2", 2), ("tux3", 2), ("gpu7", 1)]),
        ("a[1-2]b[1-2]", "1(x4)", [("a1b1", 1), ("a1b2", 1), ("a2b1", 1), ("a2b2", 1)]),
    ],
)
def test_slurm_nodelist_and_tasks(
    nodelist: str, tasks: str, expected: list[tuple[str, int]]
) -> None:
    job = slurm_job(_slurm(nodelist, tasks))
    assert [(h.name, h.slots) for h in job.inventory.hosts] == expected
    assert job.scheduler is Scheduler.SLURM and job.job_id == "77"
    assert job.default_backend is Backend.SRUN
    assert f"SLURM_TASKS_PER_NODE={tasks}" in job.describe()


@given(st.lists(st.integers(1, 64), min_size=1, max_size=30))
def test_tasks_per_node_round_trip(counts: list[int]) -> None:
    """Slurm's run-length form of any count list parses back to that list."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(str(counts[i]) if j - i == 1 else f"{counts[i]}(x{j - i})")
        i = j
    nodelist = f"n[1-{len(counts)}]" if len(counts) > 1 else "n1"
    job = slurm_job(_slurm(nodelist, ",".join(parts)))
    assert [h.slots for h in job.inventory.hosts] == counts


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        (_slurm("gpu[01-03]", "2(x2)"), "2 task counts for 3 nodes"),
        (_slurm("gpu[01-02]", "2(y2)"), "cannot read"),
        (_slurm("gpu[01-", "2"), "SLURM"),
        ({"SLURM_JOB_ID": "9", "SLURM_TASKS_PER_NODE": "1"}, "SLURM_JOB_NODELIST is not set"),
        ({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "a1"}, "SLURM_TASKS_PER_NODE is not set"),
        (_slurm("gpu[01-02]", "2(x2)", SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="4"),
         "inside Slurm step 0"),
    ],
)
def test_slurm_errors_are_scheduler_errors_with_hints(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(SchedulerError) as err:
        slurm_job(environ)
    assert needle in err.value.message
    assert err.value.hint
    assert err.value.exit_code == 7


def test_gpus_from_scontrol_split_per_node() -> None:
    text = (FIXTURES / "scontrol_gpus3_on_2_nodes.txt").read_text()
    job = slurm_job(_slurm("gpu[01-02]", "1(x2)", SLURM_GPUS_ON_NODE="2"), text)
    assert [h.label("gpus") for h in job.inventory.hosts] == ["2", "1"]
    assert job.notes == ()


def test_gpus_from_scontrol_node_ranges() -> None:
    text = (FIXTURES / "scontrol_gpus_per_node_1_on_4.txt").read_text()
    assert parse_scontrol_gpus(text) == {"gpu01": 1, "gpu02": 1, "gpu03": 1, "gpu04": 1}
    job = slurm_job(_slurm("gpu[01-04]", "1,6,2,1"), text)
    assert [n.split(":")[0] for n in job.notes] == ["gpu02", "gpu03"]  # more tasks than GPUs


def test_node_addresses_from_scontrol_show_node() -> None:
    # captured from `scontrol -o show node gpu[01-02]` on the emulated cluster (Slurm 22.05)
    text = (FIXTURES / "scontrol_nodes_emulated.txt").read_text()
    assert parse_scontrol_node_addrs(text) == {"gpu01": "127.0.0.1", "gpu02": "127.0.0.1"}
    job = slurm_job(_slurm("gpu[01-02]", "2(x2)"), None, text)
    assert [(h.name, h.address) for h in job.inventory.hosts] == [
        ("gpu01", "127.0.0.1"), ("gpu02", "127.0.0.1")]


def test_a_node_addr_that_is_its_name_or_unsafe_leaves_the_name() -> None:
    text = ("NodeName=gpu01 NodeAddr=gpu01 NodeHostName=gpu01\n"
            "NodeName=gpu02 NodeAddr=-oProxyCommand=x State=IDLE\n"
            "NodeName=gpu03 NodeAddr=fe80::1 State=IDLE\n"
            "NodeName=gpu04 NodeAddr=10.1.1.17 NodeHostName=node-17\n")
    assert parse_scontrol_node_addrs(text) == {"gpu01": "gpu01", "gpu04": "10.1.1.17"}
    job = slurm_job(_slurm("gpu[01-04]", "1(x4)"), None, text)
    assert [h.address for h in job.inventory.hosts] == [None, None, None, "10.1.1.17"]
    assert slurm_job(_slurm("gpu01", "1")).inventory.hosts[0].address is None


def test_no_gres_means_zero_gpus() -> None:
    text = (FIXTURES / "scontrol_no_gres.txt").read_text()
    assert parse_scontrol_gpus(text) == {"gpu02": 0, "gpu03": 0, "gpu04": 0}


def test_gpus_fall_back_to_environment() -> None:
    job = slurm_job(_slurm("gpu[01-02]", "4(x2)", SLURM_GPUS_ON_NODE="4"), "garbage")
    assert [h.label("gpus") for h in job.inventory.hosts] == ["4", "4"]
    job = slurm_job(_slurm("gpu[01-02]", "4(x2)", SLURM_GPUS_PER_NODE="a100:4"))
    assert [h.label("gpus") for h in job.inventory.hosts] == ["4", "4"]
    job = slurm_job(_slurm("gpu[01-02]", "4(x2)"))
    assert [h.label("gpus") for h in job.inventory.hosts] == [None, None]


@pytest.mark.parametrize(
    ("field", "count"),
    [
        ("gpu:2(IDX:0-1)", 2),
        ("gpu:a100:2(IDX:0,2)", 2),
        ("gpu:a100:2(IDX:0,2),nic:1(IDX:0)", 2),
        ("nic:1(IDX:0),gpu:4(IDX:0-3)", 4),
        ("gpu(IDX:0-3)", 4),
        ("gpu:a100(IDX:0,2-3)", 3),
        ("gpu:tesla:1(IDX:0),gpu:a100:2(IDX:1-2)", 3),
        ("gpu:0", 0),
        ("gpu(IDX:N/A)", 0),
        ("mps:100(0/100,0/100)", 0),
        ("", 0),
    ],
)
def test_gres_gpu_count(field: str, count: int) -> None:
    assert gres_gpu_count(field) == count


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pbs_select2_mpiprocs4.nodefile", [("node-a01", 4), ("node-b07", 4)]),
        ("pbs_uneven_chunks.nodefile", [("r1n03", 2), ("r2n11", 1), ("r1n05", 1)]),
        ("pbs_fqdn_mpiprocs1.nodefile",
         [("cn001.cluster.example", 1), ("cn002.cluster.example", 1)]),
    ],
)
def test_pbs_nodefile_fixtures(name: str, expected: list[tuple[str, int]]) -> None:
    path = FIXTURES / name
    job = pbs_job({"PBS_JOBID": "4711.pbs01", "PBS_NODEFILE": str(path)}, path.read_text())
    assert [(h.name, h.slots) for h in job.inventory.hosts] == expected
    assert job.default_backend is Backend.MPIRUN
    assert job.describe().startswith("pbs job 4711.pbs01:")


def test_pbs_bad_nodefile_is_a_scheduler_error() -> None:
    with pytest.raises(SchedulerError, match="no hosts found"):
        pbs_job({"PBS_JOBID": "1"}, "\n\n")
    with pytest.raises(SchedulerError, match="characters not allowed"):
        pbs_job({"PBS_JOBID": "1"}, "good01\nbad;rm\n")


def test_inventory_from_scheduler_reads_the_pbs_nodefile(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn2\nn2\n")
    job = inventory_from_scheduler({"PBS_JOBID": "3.s", "PBS_NODEFILE": str(nodefile)})
    assert job is not None and job.inventory.source == str(nodefile)
    assert [(h.name, h.slots) for h in job.inventory.hosts] == [("n1", 2), ("n2", 2)]
    with pytest.raises(SchedulerError, match="PBS_NODEFILE is not set or cannot be read"):
        inventory_from_scheduler({"PBS_JOBID": "3.s", "PBS_NODEFILE": str(tmp_path / "gone")})
    assert inventory_from_scheduler({"HOME": "/root"}) is None
