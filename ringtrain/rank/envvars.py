"""Every ``RINGTRAIN_*`` variable the launcher sets for the ranks, declared once.

The contract between ``ringtrain.launch.plan.make`` (which sets them) and the code that runs on the
hosts (the rank agent, the reaper, the training API), so both sides name the same variable.
Standard library only, like the rest of ``ringtrain.rank``.
"""

from __future__ import annotations

PREFIX = "RINGTRAIN_"

RUN_DIR = "RINGTRAIN_RUN_DIR"  # runs/<id>: logs, result.json, default checkpoints
RUN_ID = "RINGTRAIN_RUN_ID"  # the reaper finds a job's processes by it
ATTEMPT = "RINGTRAIN_ATTEMPT"  # 1, 2, ... across restarts
CONTROL_ADDR = "RINGTRAIN_CONTROL_ADDR"  # host:port of the launcher's control server
CONTROL_TOKEN = "RINGTRAIN_CONTROL_TOKEN"  # noqa: S105 - a name; its value is a secret: never in argv, logs or plan.json
CONTROL_HUB = "RINGTRAIN_CONTROL_HUB"  # 1: ranks check in with their host's hub (rank/hub.py)
LAUNCHER_TIMEOUT = "RINGTRAIN_LAUNCHER_TIMEOUT"  # dead-man switch, seconds
CHECKPOINT_URL = "RINGTRAIN_CHECKPOINT_URL"  # --checkpoint, when given
CHECKPOINT_GRACE = "RINGTRAIN_CHECKPOINT_GRACE"  # seconds a storage outage may last
GLOO_PER_HOST = "RINGTRAIN_GLOO_PER_HOST"  # bench: ranks per host for Gloo rendezvous
RELAY_FD = "RINGTRAIN_RELAY_FD"  # set by the rank entry for a program it runs as its child
TF_CLUSTER = "RINGTRAIN_TF_CLUSTER"  # TF strategies: the cluster and each rank's task (JSON)
ENV_FILE = "RINGTRAIN_ENV_FILE"  # mpirun, horovodrun: the file of the secret values (a path)
WARM = "RINGTRAIN_WARM"  # --elastic with spares: the run whose warm processes may take a rank
WARM_TAKEN = "RINGTRAIN_WARM_TAKEN"  # set in a warm process once it is the rank: never again
# horovodrun: the launcher's folder of its ssh shim, first on horovodrun's PATH, which reaches
# every rank on every host; the rank entry takes it off PATH (on a rank's host it names
# another process's descriptor or folder, not the shim)
LAUNCHER_BIN = "RINGTRAIN_LAUNCHER_BIN"

ALL = (RUN_DIR, RUN_ID, ATTEMPT, CONTROL_ADDR, CONTROL_TOKEN, CONTROL_HUB, LAUNCHER_TIMEOUT,
       CHECKPOINT_URL, CHECKPOINT_GRACE, GLOO_PER_HOST, RELAY_FD, TF_CLUSTER, ENV_FILE, WARM,
       WARM_TAKEN, LAUNCHER_BIN)
