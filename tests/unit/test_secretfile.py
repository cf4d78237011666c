"""The secrets file of a horovodrun --gloo job (ringtrain.rank.secretfile): written new, 0600,
in the user's own 0700 directory, through no link; read back only when it is still so; removed
per run. ``root`` stands for the home directory, so nothing here touches the real one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ringtrain.rank import envvars
from ringtrain.rank.secretfile import (
    SecretFileError,
    apply,
    encode,
    load,
    path_for,
    remove,
    remove_run,
    store,
)

VALUES = {"RINGTRAIN_CONTROL_TOKEN": "tok", "MY_API_TOKEN": "a b'c\"\n$HOME", "EMPTY_KEY": ""}
PATH = path_for("20240101-000000-ab12", 1)
OTHER_UID = 4242


def _secrets_dir(root: Path) -> Path:
    return root / ".ringtrain" / "secrets"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_written_new_0600_in_0700_directories_and_read_back(tmp_path: Path) -> None:
    old = os.umask(0o077 | 0o200)  # a umask that would leave the file read-only
    try:
        store(PATH, encode(VALUES), root=tmp_path)
    finally:
        os.umask(old)
    written = _secrets_dir(tmp_path) / "20240101-000000-ab12-1.json"
    assert PATH == "~/.ringtrain/secrets/20240101-000000-ab12-1.json"
    assert _mode(written) == 0o600
    assert _mode(_secrets_dir(tmp_path)) == 0o700 and _mode(tmp_path / ".ringtrain") == 0o700
    assert [p.name for p in _secrets_dir(tmp_path).iterdir()] == [written.name]  # no temp left
    assert load(PATH, root=tmp_path) == VALUES
    env = {envvars.ENV_FILE: PATH, "MY_API_TOKEN": "the host's own"}
    apply(env, root=tmp_path)
    assert env == {envvars.ENV_FILE: PATH, **VALUES}  # the launcher's values win


def test_nothing_to_apply_without_the_pointer(tmp_path: Path) -> None:
    env = {"A": "1"}
    apply(env, root=tmp_path)
    assert env == {"A": "1"}


def test_a_home_shared_by_hosts_takes_the_same_values_again_and_refuses_others(
        tmp_path: Path) -> None:
    store(PATH, encode(VALUES), root=tmp_path)
    store(PATH, encode(VALUES), root=tmp_path)  # a second host, same home: accepted
    with pytest.raises(SecretFileError, match="already exists with other values"):
        store(PATH, encode({"X_TOKEN": "other"}), root=tmp_path)
    assert load(PATH, root=tmp_path) == VALUES


def test_a_loose_directory_of_ours_is_tightened(tmp_path: Path) -> None:
    _secrets_dir(tmp_path).mkdir(parents=True, mode=0o777)
    _secrets_dir(tmp_path).chmod(0o777)
    store(PATH, encode(VALUES), root=tmp_path)
    assert _mode(_secrets_dir(tmp_path)) == 0o700


@pytest.mark.parametrize("linked", [".ringtrain", ".ringtrain/secrets"])
def test_a_linked_directory_is_refused(tmp_path: Path, linked: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "secrets").mkdir(parents=True)
    root = tmp_path / "home"
    (root / linked).parent.mkdir(parents=True)
    (root / linked).symlink_to(elsewhere if linked == ".ringtrain" else elsewhere / "secrets")
    shown = "~/" + linked
    with pytest.raises(SecretFileError, match=f"^{shown} is a symbolic link; refused$"):
        store(PATH, encode(VALUES), root=root)
    assert list((elsewhere / "secrets").iterdir()) == []


def test_a_link_where_the_file_goes_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("untouched")
    _secrets_dir(tmp_path).mkdir(parents=True, mode=0o700)
    (_secrets_dir(tmp_path) / "20240101-000000-ab12-1.json").symlink_to(target)
    with pytest.raises(SecretFileError, match="is a symbolic link; refused"):
        store(PATH, encode(VALUES), root=tmp_path)
    assert target.read_text() == "untouched"
    with pytest.raises(SecretFileError, match="is a symbolic link; refused"):
        load(PATH, root=tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    _secrets_dir(tmp_path).mkdir(parents=True, mode=0o700)
    os.chown(_secrets_dir(tmp_path), OTHER_UID, -1)
    with pytest.raises(SecretFileError, match=f"belongs to uid {OTHER_UID}, not to you"):
        store(PATH, encode(VALUES), root=tmp_path)


def test_the_rank_refuses_a_file_that_others_could_read_or_that_is_missing(
        tmp_path: Path) -> None:
    store(PATH, encode(VALUES), root=tmp_path)
    written = _secrets_dir(tmp_path) / "20240101-000000-ab12-1.json"
    written.chmod(0o644)
    with pytest.raises(SecretFileError, match=r"has mode 0644, not 0600; refused$"):
        load(PATH, root=tmp_path)
    written.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(written, OTHER_UID, -1)
        with pytest.raises(SecretFileError, match=f"belongs to uid {OTHER_UID}, not to you"):
            load(PATH, root=tmp_path)
    written.unlink()
    with pytest.raises(SecretFileError, match="does not exist"):
        apply({envvars.ENV_FILE: PATH}, root=tmp_path)


@pytest.mark.parametrize("path", ["~/.ringtrain/x.json", "~/.ringtrain/secrets/../x-1.json",
                                  "/etc/passwd", "~/.ringtrain/secrets/run-1.txt"])
def test_only_a_secrets_file_path_is_written(tmp_path: Path, path: str) -> None:
    with pytest.raises(SecretFileError, match="is not a secrets file path"):
        store(path, encode(VALUES), root=tmp_path)


@pytest.mark.parametrize("data", [b"", b"[1]", b'{"BAD NAME": "x"}', b'{"A": 1}', b"\xff"])
def test_only_a_secrets_file_is_written(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(SecretFileError, match="not a secrets file"):
        store(PATH, data, root=tmp_path)


def test_teardown_removes_every_file_of_the_run_and_no_other(tmp_path: Path) -> None:
    for attempt in (1, 2):
        store(path_for("r1", attempt), encode(VALUES), root=tmp_path)
    store(path_for("r10", 1), encode(VALUES), root=tmp_path)
    (_secrets_dir(tmp_path) / ".r1-3.json.0123abcd.tmp").write_text("{}")  # a writer's leftover
    assert remove_run("r1", root=tmp_path) == 3
    assert [p.name for p in _secrets_dir(tmp_path).iterdir()] == ["r10-1.json"]
    assert remove(path_for("r10", 1), root=tmp_path) is True
    assert remove(path_for("r10", 1), root=tmp_path) is False
    assert remove_run("r1", root=tmp_path / "nowhere") == 0
