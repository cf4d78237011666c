"""Review findings on this change, each kept closed by a test."""

from __future__ import annotations

import grp
import json
import os
from pathlib import Path

from click.testing import CliRunner

from ringtrain.checkpoint.location import Location
from ringtrain.cli import cli
from ringtrain.keras.state import mismatch
from ringtrain.launch.job.run import find_failed_ranks
from ringtrain.launch.plan.secretvars import redact_value
from ringtrain.trust import Owner, untrusted_file


def test_a_ringtrain_error_in_a_rank_names_that_rank() -> None:
    """Under Gloo or srun no launcher line names the rank: its log does, by the traceback or
    by the line the rank's entry prints for a ringtrain error."""
    tails = {0: ["training"], 1: ["ringtrain: error: checkpoint x belongs to another model"]}
    assert find_failed_ranks([], tails) == [(1, None)]


def test_plan_json_is_private_so_launch_from_trusts_it_under_umask_002(tmp_path: Path,
                                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print('hi')\n")
    old = os.umask(0o002)
    try:
        done = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "-H",
                                        "localhost:2", "--runs-dir", "runs", "t.py"])
    finally:
        os.umask(old)
    assert done.exit_code == 0, done.output
    (plan,) = Path("runs").glob("*/attempt-1/plan.json")
    assert plan.stat().st_mode & 0o777 == 0o600
    again = CliRunner().invoke(cli, ["launch", "--from", str(plan.parent.parent), "--dry-run"])
    assert again.exit_code == 0, again.output


def test_group_write_is_fine_for_the_owners_private_group_only() -> None:
    uid = os.geteuid()
    private = next((g.gr_gid for g in grp.getgrall() if g.gr_name == _user(uid)
                    and not set(g.gr_mem) - {_user(uid)}), None)
    if private is not None:
        assert untrusted_file(Owner(uid, 0o664, private), uid) is None
    shared = next(g.gr_gid for g in grp.getgrall() if g.gr_name != _user(uid))
    assert untrusted_file(Owner(uid, 0o664, shared), uid) is not None
    assert untrusted_file(Owner(uid, 0o646, private or shared), uid) is not None


def _user(uid: int) -> str:
    import pwd

    return pwd.getpwuid(uid).pw_name


def test_a_url_password_with_a_slash_or_an_at_is_redacted_whole() -> None:
    assert redact_value("DB", "postgres://u:ab/cd@db/x") == "postgres://u:<redacted>@db/x"
    assert "p@ss" not in redact_value("DB", "postgres://u:p@ss@db/x")


def test_a_path_with_a_doubled_leading_slash_is_a_path() -> None:
    assert Location.parse("//scratch/ckpt") == Location("file", "/scratch/ckpt")


def test_the_model_check_matches_by_position_as_tensorflow_restores() -> None:
    saved = [["dense/kernel:0", [8, 128]], ["dense/bias:0", [128]]]
    renamed = [["dense_1/kernel:0", [8, 128]], ["dense_1/bias:0", [128]]]
    assert mismatch(saved, renamed) == []
    narrower = [["dense_1/kernel:0", [8, 64]], ["dense_1/bias:0", [64]]]
    assert mismatch(saved, narrower)[0] == "dense_1/kernel:0: checkpoint (8, 128) vs model (8, 64)"
    assert mismatch(saved, narrower[:1])[1] == "dense/bias:0: checkpoint (128,) vs model absent"
    assert json.dumps(mismatch(None, narrower)) == "[]"
