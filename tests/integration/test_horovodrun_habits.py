"""The command lines horovodrun users type, for real on local slots: ``python -m pkg.train``,
``--hostfile``, a wrapper script as the rank program, this machine by its host name, a
misspelt option, ``--``, ``--mpi-arg``, ``-q`` and ``--json``."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RINGTRAIN = [sys.executable, "-m", "ringtrain"]

pytestmark = [pytest.mark.slow, pytest.mark.mpi]

TRAIN = """\
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import horovod.tensorflow as hvd
from ringtrain.rank import progress
hvd.init()
total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum)
progress.report(epoch=1, epochs=1, step=5, loss=0.5)
token = "RINGTRAIN_CONTROL_TOKEN" in os.environ
print("SUM", hvd.rank(), int(total.numpy()), " ".join(sys.argv[1:]), "token", token, flush=True)
print("WORLD", *(os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                             "LOCAL_WORLD_SIZE")), flush=True)
sys.exit(int(os.environ.get("EXIT_WITH", "0")) if hvd.rank() == 1 else 0)
"""


def _launch(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RINGTRAIN, "launch", "--runs-dir", str(tmp_path / "runs"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **(env or {})},
    )


def _run_dir(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def test_python_dash_m_with_hostfile_mpi_args_quiet_and_json(tmp_path: Path) -> None:
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(TRAIN)
    (tmp_path / "hf").write_text("localhost slots=2\n")
    proc = _launch(tmp_path, "-q", "--hostfile", "hf", "-np", "2", "--json",
                   "--mpi-arg=--display-map", "python", "-m", "trainpkg.train", "--tag", "x")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # stdout holds the result and nothing else
    assert result["state"] == "succeeded" and result["run_id"] == _run_dir(tmp_path).name
    assert "[0] SUM 0 1 --tag x" in proc.stderr  # the module's own argv, in-process
    assert "[1] SUM 1 1 --tag x" in proc.stderr
    assert "[1] WORLD 1 2 1 2" in proc.stderr  # torchrun's variables, for loggers (issue 27)
    assert "ringtrain check" not in proc.stderr  # -q: no pre-flight table when all is well
    assert "JOB MAP" in proc.stderr  # mpirun read --display-map
    assert "ringtrain: run " not in proc.stderr  # -q: status lines only in events.log
    plan = json.loads((_run_dir(tmp_path) / "attempt-1" / "plan.json").read_text())
    assert plan["argv"][-9:] == ["--display-map", sys.executable, "-m", "ringtrain.rank.entry",
                                 "--mpi", "-m", "trainpkg.train", "--tag", "x"], plan["argv"]
    shown = subprocess.run([*RINGTRAIN, "runs", "--runs-dir", str(tmp_path / "runs"), "show",
                            result["run_id"], "--json"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(shown.stdout)["state"] == "succeeded"


def _wrapper(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    wrapper = tmp_path / "run.sh"
    wrapper.write_text(f'#!/bin/sh\necho "wrapper on $(hostname)"\nexec {sys.executable} '
                       'train.py "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_a_wrapper_script_runs_as_the_rank_and_its_python_reports_through_it(
    tmp_path: Path,
) -> None:
    """The wrapper's python reports progress through the rank entry (relay): the launcher
    shows it; the launcher's token never reaches the user's program."""
    _wrapper(tmp_path)
    proc = _launch(tmp_path, "-H", "localhost:2", "./run.sh", "--lr", "0.1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[0] SUM 0 1 --lr 0.1 token False" in proc.stdout, proc.stdout[-2000:]
    assert "wrapper on" in proc.stdout
    events = (_run_dir(tmp_path) / "events.log").read_text()
    assert "training: epoch 1/1, step 5, loss 0.5000" in events, events
    plan = json.loads((_run_dir(tmp_path) / "attempt-1" / "plan.json").read_text())
    assert plan["spec"]["entry"] == "executable"


def test_a_failing_wrapper_is_a_failed_rank_with_its_exit_code(tmp_path: Path) -> None:
    _wrapper(tmp_path)
    proc = _launch(tmp_path, "-H", "localhost:2", "./run.sh", env={"EXIT_WITH": "3"})
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "rank 1 on localhost failed (exit code 3)" in proc.stderr


def test_this_machine_by_its_host_name_starts_without_ssh(tmp_path: Path) -> None:
    """-p 1: were the probe or mpirun to use SSH, nothing listens on port 1 and the launch
    fails; as horovodrun does, the ranks start here."""
    (tmp_path / "train.py").write_text(TRAIN)
    name = socket.gethostname()
    proc = _launch(tmp_path, "-p", "1", "-H", f"{name}:2", "train.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{name}: this machine; its ranks start without SSH" in proc.stderr
    assert "[1] SUM 1 1" in proc.stdout


def test_a_misspelt_option_is_named_with_a_suggestion(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    proc = _launch(tmp_path, "--hostz", "h.txt", "train.py")
    assert proc.returncode == 2
    assert "No such option '--hostz'" in proc.stderr and "'--hosts'" in proc.stderr
    assert "not found" not in proc.stderr and not (tmp_path / "runs").exists()


def test_double_dash_ends_ringtrains_options(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    proc = _launch(tmp_path, "--dry-run", "-H", "localhost:2", "--mpi-arg=--report-bindings",
                   "--", "train.py", "-q", "--json")
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout
    assert "--report-bindings" in argv.split("ringtrain.rank.entry")[0]
    assert "train.py -q --json" in argv


def _entry(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGTRAIN_")}
    return subprocess.run([sys.executable, "-m", "ringtrain.rank.entry", *args],
                          capture_output=True, text=True, timeout=60, check=False, env=env)


def test_a_program_rank_keeps_whole_lines_and_its_exit_status() -> None:
    proc = _entry("--exec", "sh", "-c", 'printf "a"; sleep 0.2; printf "b\\n"; exit 4')
    assert proc.returncode == 4 and proc.stdout == "ab\n"
    proc = _entry("--exec", "sh", "-c", "kill -TERM $$")
    assert proc.returncode == 128 + 15
    proc = _entry("--exec", "/nonexistent/prog")
    assert proc.returncode == 127 and "cannot run '/nonexistent/prog'" in proc.stderr


TUNING_LINES = [
    [],
    ["--fusion-threshold-mb", "32", "--cycle-time-ms", "3.5", "--cache-capacity", "2048"],
    ["--hierarchical-allreduce", "--hierarchical-allgather", "--log-level", "DEBUG"],
    ["--autotune", "--autotune-log-file", "/tmp/at.csv"],
    ["--autotune-log-file", "/tmp/at.csv"],  # without --autotune horovodrun sets nothing
    ["--timeline-filename", "/tmp/tl.json", "--timeline-mark-cycles"],
    ["--timeline-mark-cycles"],
    ["--fusion-threshold-mb", "0", "--log-level", "WARNING"],
    ["--gloo-timeout-seconds", "5"],
]


def _horovodrun_env(flags: list[str]) -> dict[str, str]:
    """What horovodrun itself sets for ``flags``: Horovod's own parser and config code."""
    from horovod.runner import launch
    from horovod.runner.common.util import config_parser

    saved = sys.argv
    try:
        sys.argv = ["horovodrun", "-np", "2", "-H", "localhost:2", *flags, "python", "t.py"]
        args = launch.parse_args()
    finally:
        sys.argv = saved
    env: dict[str, str] = {}
    config_parser.set_env_from_args(env, args)
    return env


@pytest.mark.parametrize("flags", TUNING_LINES, ids=lambda f: " ".join(f) or "none")
def test_horovodrun_tuning_flags_set_what_horovodrun_sets(tmp_path: Path,
                                                          flags: list[str]) -> None:
    """Issue 29: the tuning flags users type from Horovod's docs, with horovodrun's meaning."""
    from ringtrain.hvd_tuning import HorovodTuning

    (tmp_path / "t.py").write_text("print('hi')\n")
    proc = _launch(tmp_path, "--dry-run", "--no-probe", "-H", "localhost:2", *flags, "t.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((_run_dir(tmp_path) / "attempt-1" / "plan.json").read_text())
    everything = HorovodTuning(1, 1.0, 1, True, True, True, "x", "y", True, "INFO", 5)
    tuning_names = {name for name, _ in everything.env()}
    ours = {k: v for k, v in plan["env"].items() if k in tuning_names}
    assert ours == _horovodrun_env(flags)


def test_tuning_flags_are_refused_where_horovod_does_not_run(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print('hi')\n")
    proc = _launch(tmp_path, "--dry-run", "--no-probe", "-H", "localhost:2", "--strategy",
                   "tf-multiworker", "--fusion-threshold-mb", "32", "t.py")
    assert proc.returncode == 2
    assert "--fusion-threshold-mb tune Horovod; --strategy tf-multiworker" in proc.stderr
    proc = _launch(tmp_path, "--dry-run", "--no-probe", "-H", "localhost:2",
                   "--output-filename", "out", "t.py")
    assert proc.returncode == 0 and "every rank's output is in" in proc.stderr
    assert not (tmp_path / "out").exists()


def _horovodrun_args(flags: list[str]) -> Any:
    """What horovodrun's own parser makes of ``flags`` (Horovod as the oracle)."""
    from horovod.runner import launch

    saved = sys.argv
    try:
        sys.argv = ["horovodrun", *flags, "python", "t.py"]
        return launch.parse_args()
    finally:
        sys.argv = saved


def _dry_spec(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str],
                                                     dict[str, Any]]:
    (tmp_path / "t.py").write_text("print('hi')\n")
    proc = _launch(tmp_path, "--dry-run", "--no-probe", *flags, "t.py")
    runs = tmp_path / "runs"
    if proc.returncode != 0 or not runs.is_dir():
        return proc, {}
    plan = json.loads((_run_dir(tmp_path) / "attempt-1" / "plan.json").read_text())
    return proc, plan


@pytest.mark.parametrize("flags", [
    ["--num-proc", "2", "-H", "localhost:2"],
    ["-np", "2", "--hosts", "localhost:2"],
    ["-np", "2", "-H", "localhost:2", "--mpi-args=-mca btl_tcp_if_exclude docker0 --bind-to "
     "none"],
    ["-np", "2", "-H", "localhost:2", "--mpi-args", "-x 'NCCL_DEBUG=INFO'"],
    ["-np", "2", "-H", "localhost:2", "--network-interfaces", "lo"],
], ids=" ".join)
def test_horovodrun_command_lines_mean_what_horovodrun_means(tmp_path: Path,
                                                             flags: list[str]) -> None:
    """Issue 27: horovodrun's own spellings, read the way horovodrun's parser reads them."""
    import shlex

    args = _horovodrun_args(flags)
    proc, plan = _dry_spec(tmp_path, *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    spec = plan["spec"]
    assert plan["np"] == args.num_proc
    assert [(h["name"], h["slots"]) for h in plan["hosts"]] == [
        (h.split(":")[0], int(h.split(":")[1])) for h in args.hosts.split(",")]
    mpi_words = shlex.split(args.mpi_args) if args.mpi_args else []
    assert spec["mpi_args"] == mpi_words
    if mpi_words:  # in mpirun's command line, in order, as given
        argv, n = plan["argv"], len(mpi_words)
        assert any(argv[i:i + n] == mpi_words for i in range(len(argv))), argv
    nics = spec["network_interface"]
    assert (set(nics.split(",")) if nics else None) == args.nics
    if "--hosts" in flags:
        assert "taken as a host list, as horovodrun's --hosts (-H) takes it" in proc.stderr


def test_mpi_args_is_never_misread_as_a_module(tmp_path: Path) -> None:
    proc, plan = _dry_spec(tmp_path, "-H", "localhost:2", "--mpi-args", "-mca btl ^openib")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert plan["spec"]["mpi_args"] == ["-mca", "btl", "^openib"]
    assert plan["spec"]["script"].endswith("t.py") and "module" not in proc.stderr
    proc, _ = _dry_spec(tmp_path, "-H", "localhost:2", "--mpi-args", "-x 'A=b")
    assert proc.returncode == 2 and "--mpi-args" in proc.stderr
    assert "No closing quotation" in proc.stderr and "Traceback" not in proc.stderr


def test_deepspeeds_dash_h_hostfile_is_refused_with_the_flag_to_use(tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("localhost slots=2\n")
    proc, _ = _dry_spec(tmp_path, "-H", "hostfile")
    assert proc.returncode == 2
    assert "-H hostfile: -H takes hosts inline (gpu01:4,gpu02:4), and hostfile is a file" in (
        " ".join(proc.stderr.split()))
    assert "pass --hosts hostfile" in proc.stderr
