"""horovodrun's tuning flags, as a value, and the HOROVOD_* variables they set. PURE.

Users type these from Horovod's docs (``--fusion-threshold-mb 32``, ``--timeline-filename
t.json``, ``--autotune``...). ``ringtrain launch`` takes them with horovodrun's meaning: the
same variables horovodrun's ``config_parser.set_env_from_args`` sets for the same command
line, on every backend (tests/integration/test_horovodrun_habits.py holds Horovod's own
parser as the oracle). The ranks read them in ``hvd.init()``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")


@dataclass(frozen=True, slots=True)
class HorovodTuning:
    fusion_threshold_mb: int | None = None
    cycle_time_ms: float | None = None
    cache_capacity: int | None = None
    hierarchical_allreduce: bool | None = None
    hierarchical_allgather: bool | None = None
    autotune: bool = False
    autotune_log_file: str | None = None
    timeline_filename: str | None = None
    timeline_mark_cycles: bool = False
    log_level: str | None = None  # Horovod's own log level (HOROVOD_LOG_LEVEL)
    gloo_timeout_seconds: int | None = None  # how long a Gloo operation waits for a peer
    output_filename: str | None = None  # no variable: the per-rank logs already hold it

    @property
    def asked(self) -> tuple[str, ...]:
        """The flags given, as horovodrun spells them (for errors and notes)."""
        default = HorovodTuning()
        return tuple("--" + f.name.replace("_", "-") for f in fields(self)
                     if getattr(self, f.name) != getattr(default, f.name))

    def env(self) -> tuple[tuple[str, str], ...]:
        """The variables horovodrun sets for these flags (none for a flag not given)."""
        out: list[tuple[str, str]] = []

        def put(name: str, value: object) -> None:
            if value is not None:
                out.append((name, str(value)))

        put("HOROVOD_FUSION_THRESHOLD",
            self.fusion_threshold_mb * 1024 * 1024 if self.fusion_threshold_mb is not None
            else None)
        put("HOROVOD_CYCLE_TIME", self.cycle_time_ms)
        put("HOROVOD_CACHE_CAPACITY", self.cache_capacity)
        put("HOROVOD_HIERARCHICAL_ALLREDUCE", _flag(self.hierarchical_allreduce))
        put("HOROVOD_HIERARCHICAL_ALLGATHER", _flag(self.hierarchical_allgather))
        if self.autotune:  # horovodrun sets the log only together with autotune
            put("HOROVOD_AUTOTUNE", 1)
            put("HOROVOD_AUTOTUNE_LOG", self.autotune_log_file)
        if self.timeline_filename:  # and the cycle marks only with a timeline
            put("HOROVOD_TIMELINE", self.timeline_filename)
            put("HOROVOD_TIMELINE_MARK_CYCLES", _flag(self.timeline_mark_cycles))
        put("HOROVOD_LOG_LEVEL", self.log_level.upper() if self.log_level else None)
        put("HOROVOD_GLOO_TIMEOUT_SECONDS", self.gloo_timeout_seconds)
        return tuple(out)


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)
