"""The ringtrain error tree. Every error a user can cause or meet is one of these.

::

    RingtrainError                  exit 1 unless a subclass says otherwise
    ├── UsageError                  exit 2   bad flags or flag combinations
    ├── InventoryError              exit 2   a host source that cannot be parsed or validated
    │                                        (carries source, line, column)
    ├── AllocationError             exit 2   hosts and slots cannot satisfy the request
    ├── SetupError                  exit 3   the local machine lacks something (mpirun, horovod,...)
    ├── ProbeError                  exit 4   pre-flight found hosts that would make the launch fail
    ├── RemoteError                 exit 4   SSH fan-out could not run (bad ssh config, key file)
    ├── LaunchError                 exit 5   the job could not be started
    ├── JobFailed                   exit = the job's own exit code (or 128+signal)
    ├── CheckpointError             exit 6   storage or commit protocol failures
    ├── SchedulerError              exit 7   Slurm / PBS environment or submission problems
    └── SimError                    exit 8   the simulated cluster cannot be built or torn down

Every error carries a ``hint``: one sentence telling the user how to fix it. ``cli.py`` maps
these to exit codes and prints ``error: <message>`` then ``  fix: <hint>``; no traceback.
``code`` names the family for tools (``--json``'s error object): ``usage``, ``inventory``, ...
"""

from __future__ import annotations


class RingtrainError(Exception):
    """Base class. ``message`` says what is wrong, ``hint`` how to fix it."""

    exit_code: int = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    @property
    def code(self) -> str:
        """The error's family for tools (``--json``): the class right under RingtrainError in
        snake case without "Error": ``usage``, ``inventory``, ``job_failed``, ``checkpoint``
        (a StorageError too), ..."""
        top = next((c for c in type(self).__mro__ if RingtrainError in c.__bases__),
                   RingtrainError)
        name = top.__name__.removesuffix("Error")  # RingtrainError itself: "ringtrain"
        return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name).lstrip("_")


class UsageError(RingtrainError):
    exit_code = 2


class InventoryError(RingtrainError):
    """A host source is malformed. Names the source and, where known, line and column."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        source: str = "",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        where = source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}" if where else message, hint)
        self.detail = message


class AllocationError(RingtrainError):
    exit_code = 2


class SetupError(RingtrainError):
    exit_code = 3


class ProbeError(RingtrainError):
    exit_code = 4


class RemoteError(RingtrainError):
    exit_code = 4


class LaunchError(RingtrainError):
    exit_code = 5


class JobFailed(RingtrainError):
    """The job ran and failed. ``exit_code`` is the job's own (128+N for signal N)."""

    def __init__(self, message: str, hint: str = "", *, exit_code: int = 1) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class CheckpointError(RingtrainError):
    exit_code = 6


class SchedulerError(RingtrainError):
    exit_code = 7


class SimError(RingtrainError):
    exit_code = 8
