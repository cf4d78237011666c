"""Parsing mpirun/horovodrun output: rank tags and the first failing rank."""

from __future__ import annotations

from ringtrain.launch.job.run import failure_from_output, find_failed_ranks, gpus_listed, parse_line
from ringtrain.launch.record.result import FailureKind

# Captured from Open MPI 4.1.4 on this machine (rank 1 raised under python -m mpi4py).
MPI_EXIT_MESSAGE = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[31701,1],1]
  Exit code:    1
--------------------------------------------------------------------------""".splitlines()

MPI_SIGNAL_MESSAGE = """\
--------------------------------------------------------------------------
mpirun noticed that process rank 3 with PID 4242 on node gpu02 exited on signal 9 (Killed).
--------------------------------------------------------------------------""".splitlines()


def test_openmpi_tag() -> None:
    line = parse_line("[1,3]<stdout>:Epoch 1/3")
    assert (line.rank, line.stream, line.text) == (3, "stdout", "Epoch 1/3")


def test_gloo_tag_and_stderr() -> None:
    line = parse_line("[12]<stderr>:Traceback (most recent call last):")
    assert (line.rank, line.stream) == (12, "stderr")


def test_untagged_line_belongs_to_launcher() -> None:
    line = parse_line("mpirun detected that one or more processes exited")
    assert line.rank is None and line.stream == "launcher"


def test_tag_text_may_contain_brackets() -> None:
    assert parse_line("[1,0]<stdout>:[1,2]<stdout>:x").text == "[1,2]<stdout>:x"


def test_failed_rank_from_exit_message() -> None:
    assert find_failed_ranks(MPI_EXIT_MESSAGE, {}) == [(1, 1)]


def test_failed_rank_from_signal_message() -> None:
    assert find_failed_ranks(MPI_SIGNAL_MESSAGE, {}) == [(3, 137)]


def test_failed_rank_from_traceback_when_launcher_is_silent() -> None:
    tails = {0: ["ok"], 2: ["Traceback (most recent call last):", "ValueError: x"], None: []}
    assert find_failed_ranks([], tails) == [(2, None)]


def test_no_failure_found() -> None:
    assert find_failed_ranks(["all good"], {0: ["fine"]}) == []


def test_failure_value_keeps_every_failed_rank_root_cause_first() -> None:
    tb = ["Traceback (most recent call last):", "RuntimeError: boom"]
    tails = {0: tb, 1: ["fine"], 3: ["killed mid-step"], None: []}
    failure = failure_from_output(MPI_SIGNAL_MESSAGE, tails, {0: "gpu01", 3: "gpu02"}, 137)
    assert failure.kind is FailureKind.RANK_SIGNAL
    assert [(r.rank, r.host, r.signal_name) for r in failure.ranks] == [
        (3, "gpu02", "SIGKILL"), (0, "gpu01", None)]
    assert failure.message == "rank 3 on gpu02 failed (signal SIGKILL)"
    text = failure.describe(attempt=2)
    assert text.splitlines()[:3] == [
        "rank 3 on gpu02 failed (signal SIGKILL) (attempt 2)", "also failed: ranks 0",
        "last lines of rank 3's log:"]
    assert "killed mid-step" in text


def test_launcher_failure_without_a_rank() -> None:
    failure = failure_from_output(["mpirun: cannot start"], {None: []}, {}, 205)
    assert failure.kind is FailureKind.LAUNCHER and failure.root is None
    assert failure.message == "the job failed (exit code 205); no rank was named"


def test_srun_label_only_for_srun() -> None:
    line = parse_line("  3: Epoch 1/2", srun=True)
    assert (line.rank, line.text) == (3, "Epoch 1/2")
    assert parse_line("3: not a rank line").rank is None
    assert parse_line("srun: error: task 2 failed", srun=True).rank is None


def test_ssh_cause_survives_a_page_of_orte_text_after_it() -> None:
    """Seen in CI: ssh's 'Host key verification failed' was followed by ORTE's 20-line
    routing complaint and fell out of a plain last-10 tail."""
    orte = [f"ORTE explanation line {i}" for i in range(25)]
    lines = ["Host key verification failed.", "-" * 60, *orte, "-" * 60]
    failure = failure_from_output(lines, {}, {0: "gpu01", 1: "gpu02"}, 255)
    assert failure.kind is FailureKind.LAUNCHER
    assert failure.launcher_tail[0] == "Host key verification failed."
    assert failure.launcher_tail[-1] == "ORTE explanation line 24"
    assert len(failure.launcher_tail) == 10
    assert "Host key verification failed." in failure.describe(1)


def test_a_line_open_mpi_tagged_twice_is_the_rank_s_one_line() -> None:
    """Seen with 120 result lines written at once: Open MPI read the pipe mid-line and tagged
    both halves; the rank wrote one line."""
    line = parse_line('[1,0]<stdout>:RINGCHECK-PAIR {"a": 0, "b"[1,0]<stdout>:: 1}')
    assert line.rank == 0 and line.text == 'RINGCHECK-PAIR {"a": 0, "b": 1}'


def test_only_working_gpus_count_as_local_slots() -> None:
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-ddc57447-cc37-b3fe-c49d-de074e669137)\n"
        "GPU 0000:07:00.0: GPU is lost. Reboot the system to recover this GPU\n"
        "Unable to determine the device handle for GPU 0000:3A:00.0: Unknown Error\n"
        "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-8dbc6058-e033-5380-9813-416c6830708a)\n"
    )
    assert gpus_listed(listing) == 2
