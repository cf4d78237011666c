"""The host names of this pytest session's sim cluster (``conftest.sim_cluster``).

A cluster other than the default ``rt`` names its hosts ``<cluster>-gpuNN`` (sim/config.py), so
a test session's cluster and a user's ``ringtrain sim up`` never share a name in /etc/hosts.
"""

from __future__ import annotations

import os

SESSION_CLUSTER = f"t{os.getpid()}"
G1, G2, G3, G4 = (f"{SESSION_CLUSTER}-gpu{i:02d}" for i in range(1, 5))
