"""The simulated Slurm cluster's slurm.conf (ringtrain.sim.slurm.render_slurm_conf): the settings
that decide how soon a requeued job runs again."""

from __future__ import annotations

from pathlib import Path

from ringtrain.sim.slurm import SlurmSimConfig, render_slurm_conf


def _settings(cfg: SlurmSimConfig) -> dict[str, str]:
    text = render_slurm_conf(cfg, Path("/state"), "node", [7000, 7001, 7002, 7003, 7004])
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_requeued_job_is_started_by_a_scheduler_pass_a_second_after_its_begin_time() -> None:
    conf = _settings(SlurmSimConfig())
    sched = dict(p.split("=", 1) for p in conf["SchedulerParameters"].split(","))
    # with Slurm's default, a pass every 60 s, a requeued job waited its begin time (21 s)
    # and then up to the next pass: 45-59 s measured, test_slurm_preempt's one requeue
    assert sched == {"batch_sched_delay": "0", "sched_interval": "1"}
    assert "cred_expire=20" in conf["AuthInfo"]  # the requeued job's wait (default 120 s)


def test_the_scheduler_interval_is_the_configs() -> None:
    sched = _settings(SlurmSimConfig(sched_interval_s=60))["SchedulerParameters"]
    assert sched.split(",")[-1] == "sched_interval=60"
