"""The assembly of a launch, below both doors: ``ringtrain launch`` (cli/launch_cmd.py) parses
flags and draws; ``ringtrain.run()`` (api.py) maps keyword arguments; both hand the same
``LaunchOptions`` to ``build_spec`` and the spec to ``prepare``, which returns the Session.

    layers.py        PURE: the config keys, their types, and how the layers fill options
    settings.py      ringtrain.toml, the user's config, RINGTRAIN_<KEY>: read for both doors
    launch_spec.py   PURE: LaunchOptions -> LaunchSpec (build_spec)
    entry_kind.py    a script, a module or a program; --from's recorded spec
    ring_gate.py     --ring-check before the job, through the Reporter
    remotes.py       the default Remote factory (SSH: paramiko, or OpenSSH's ssh)
    prepare.py       spec -> entry -> hosts -> srun refusal -> ring pre-check -> Session
"""

from ringtrain.assembly import settings
from ringtrain.assembly.launch_spec import LaunchOptions, build_spec
from ringtrain.assembly.prepare import prepare, write_plan
from ringtrain.hostfile.load import PYTHON as KEYWORD_SPELLING  # ringtrain.run()'s words
from ringtrain.hostfile.load import check_host_source

__all__ = ["KEYWORD_SPELLING", "LaunchOptions", "build_spec", "check_host_source", "prepare",
           "settings", "write_plan"]
