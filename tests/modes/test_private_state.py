"""Saved kernel variables are private to their user, and found only from their id.

Security review: states were world-readable (0755/0644, another user unpickled an
``api_key``), and discard/restore followed the ``path`` written in ``manifest.json``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.errors import BadInputError, NotFoundError, PermissionDeniedError
from jupyter_starverse.modes import discard_state, list_states, read_state, restore_namespace, save_namespace

OTHER_UID = 65534  # nobody
BIG = bytes(range(256)) * 2048  # 512 KB: a file of its own (small values share small.bin)
BAD_IDS = ["../x", "/etc", "a/b", "..", ".", "", "../../etc/passwd", ".20260101-000000-deadbeef.tmp",
           "20260101-000000-deadbeef/..", "20260101-000000-deadbeef/../../victim"]  # fmt: skip


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _state_folder(home: Path, state_id: str) -> Path:
    return home / "modes" / "saved" / state_id


def _set_manifest_path(folder: Path, path: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["path"] = path
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder elsewhere, shaped like a saved state, that must never be touched."""
    folder = tmp_path / "victim"
    (folder / "vars").mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me")
    (folder / "vars" / "small.bin").write_bytes(pickle.dumps({"x": b"\x80\x04K\x07."}))
    return folder


# -- files are private from their creation ---------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_saved_state_is_0700_and_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "home"
    old = os.umask(umask)
    try:
        state = save_namespace({"api_key": "sk-secret", "big": BIG}, home=home)
    finally:
        os.umask(old)
    folder = _state_folder(home, state.id)
    assert Path(state.path) == folder
    assert _mode(home / "modes" / "saved") == 0o700
    assert _mode(folder) == 0o700 and _mode(folder / "vars") == 0o700
    files = [folder / "manifest.json", *sorted((folder / "vars").iterdir())]
    assert len(files) == 3  # manifest, small.bin, the file of big
    for path in files:
        info = os.lstat(path)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, path
        assert info.st_uid == os.geteuid()
    assert not list((home / "modes" / "saved").glob(".*"))  # no temporary folder left


def test_an_existing_open_states_root_is_made_private(tmp_path: Path) -> None:
    root = tmp_path / "home" / "modes" / "saved"
    root.mkdir(parents=True)
    root.chmod(0o755)  # written by an older version
    save_namespace({"x": 1}, home=tmp_path / "home")
    assert _mode(root) == 0o700


@pytest.fixture
def traversable_home() -> Iterator[Path]:
    """A home outside pytest's private temp folder, every parent traversable by another uid."""
    base = Path(tempfile.mkdtemp(prefix="sv-private-"))
    try:
        base.chmod(0o755)
        yield base / "home"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _open_as(uid: int, path: Path) -> str:
    code = (
        "import sys\n"
        "try:\n"
        "    open(sys.argv[1], 'rb').read(1)\n"
        "except PermissionError:\n"
        "    print('PermissionError')\n"
        "else:\n"
        "    print('opened')\n"
    )
    python = Path(sys.prefix, "bin", "python")  # .venv/bin/python
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", str(python), "-c", code, str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to run as a second uid")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv to run as a second uid")
def test_another_uid_cannot_read_saved_variables(traversable_home: Path) -> None:
    home = traversable_home
    state = save_namespace({"api_key": "sk-secret", "big": BIG}, home=home)
    folder = _state_folder(home, state.id)
    # Every folder above the state is open to the other uid, even the states root: only the
    # state's own modes may protect it.
    for parent in (home, home / "modes", home / "modes" / "saved"):
        parent.chmod(0o755)
    canary = home / "modes" / "canary.txt"
    canary.write_text("anyone may read this")
    canary.chmod(0o644)
    if _open_as(OTHER_UID, canary) != "opened":  # the check below must not pass for a wrong reason
        pytest.skip(f"uid {OTHER_UID} cannot run {sys.prefix}/bin/python or reach {home}")
    targets = [folder / "manifest.json", *sorted((folder / "vars").iterdir())]
    for path in targets:
        assert _open_as(OTHER_UID, path) == "PermissionError", path
    # Even with the folders opened up, the files themselves stay 0600.
    folder.chmod(0o755)
    (folder / "vars").chmod(0o755)
    for path in targets:
        assert _open_as(OTHER_UID, path) == "PermissionError", path


# -- restore loads only what this uid wrote -----------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown to another uid")
@pytest.mark.parametrize("what", ["folder", "manifest", "small", "big", "all"])
def test_restore_refuses_a_state_written_by_another_uid(tmp_path: Path, what: str) -> None:
    home = tmp_path / "home"
    state = save_namespace({"x": 1, "big": BIG}, home=home)
    folder = _state_folder(home, state.id)
    manifest = json.loads((folder / "manifest.json").read_text())
    chosen = {
        "folder": [folder],
        "manifest": [folder / "manifest.json"],
        "small": [folder / "vars" / "small.bin"],
        "big": [folder / "vars" / manifest["files"]["big"]["file"]],
        "all": [folder, folder / "vars", *folder.rglob("*")],
    }[what]
    for path in chosen:
        os.chown(path, OTHER_UID, OTHER_UID)
    ns: dict[str, Any] = {}
    with pytest.raises(PermissionDeniedError, match=f"belongs to uid {OTHER_UID}") as err:
        restore_namespace(ns, home=home, state_id=state.id)
    assert err.value.hint
    assert ns == {}  # nothing unpickled
    assert folder.is_dir()  # and nothing deleted


@pytest.mark.parametrize("where", ["folder", "vars", "manifest", "small"])
def test_restore_refuses_a_state_others_may_write(tmp_path: Path, where: str) -> None:
    home = tmp_path / "home"
    state = save_namespace({"x": 1}, home=home)
    folder = _state_folder(home, state.id)
    path = {"folder": folder, "vars": folder / "vars", "manifest": folder / "manifest.json",
            "small": folder / "vars" / "small.bin"}[where]  # fmt: skip
    path.chmod(0o777 if path.is_dir() else 0o666)
    ns: dict[str, Any] = {}
    with pytest.raises(PermissionDeniedError, match="other users may write"):
        restore_namespace(ns, home=home, state_id=state.id)
    assert ns == {} and folder.is_dir()


def test_restore_still_reads_a_state_of_an_older_version(tmp_path: Path) -> None:
    """0755/0644 of this same user (written before the fix) is still this user's own."""
    home = tmp_path / "home"
    state = save_namespace({"x": 1}, home=home)
    folder = _state_folder(home, state.id)
    for path in (folder, folder / "vars"):
        path.chmod(0o755)
    for path in (folder / "manifest.json", folder / "vars" / "small.bin"):
        path.chmod(0o644)
    ns: dict[str, Any] = {}
    assert restore_namespace(ns, home=home, state_id=state.id).restored == ("x",)
    assert ns == {"x": 1} and not folder.exists()


def test_restore_does_not_follow_a_file_link(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    state = save_namespace({"x": 1}, home=home)
    small = _state_folder(home, state.id) / "vars" / "small.bin"
    small.unlink()
    small.symlink_to(victim / "vars" / "small.bin")
    ns: dict[str, Any] = {}
    with pytest.raises(PermissionDeniedError, match="not a regular file"):
        restore_namespace(ns, home=home, state_id=state.id)
    assert ns == {}


# -- never follow paths stored in data ------------------------------------------------------


def test_discard_ignores_the_manifest_path(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    state = save_namespace({"x": 1}, home=home)
    other = save_namespace({"y": 2}, home=home)
    folder = _state_folder(home, state.id)
    _set_manifest_path(folder, str(victim))
    assert read_state(home, state.id).path == str(folder)  # the manifest's path is not believed
    discard_state(home, state.id)
    assert (victim / "precious.txt").read_text() == "keep me"
    assert not folder.exists()
    assert [s.id for s in list_states(home)] == [other.id]

    # The same with the path pointing at another state: that state stays.
    _set_manifest_path(_state_folder(home, other.id), str(folder))
    third = save_namespace({"z": 3}, home=home)
    _set_manifest_path(_state_folder(home, third.id), str(_state_folder(home, other.id)))
    discard_state(home, third.id)
    assert [s.id for s in list_states(home)] == [other.id]


def test_restore_reads_and_deletes_only_the_states_own_folder(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    state = save_namespace({"x": 1}, home=home)
    folder = _state_folder(home, state.id)
    _set_manifest_path(folder, str(victim))
    ns: dict[str, Any] = {}
    report = restore_namespace(ns, home=home, state_id=state.id)
    assert report.restored == ("x",) and ns == {"x": 1}
    assert not folder.exists()
    assert (victim / "precious.txt").read_text() == "keep me" and (victim / "vars" / "small.bin").is_file()


@pytest.mark.parametrize("name", ["../../../victim/evil.bin", "/etc/passwd", "../manifest.json", "x/../small.bin"])
def test_restore_loads_no_file_named_outside_the_state(tmp_path: Path, name: str) -> None:
    home = tmp_path / "home"
    evil = tmp_path / "victim"
    evil.mkdir()
    (evil / "evil.bin").write_bytes(pickle.dumps("from elsewhere"))
    state = save_namespace({"x": 1, "y": BIG}, home=home)
    folder = _state_folder(home, state.id)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["y"]["file"] = name
    (folder / "manifest.json").write_text(json.dumps(manifest))
    ns: dict[str, Any] = {}
    report = restore_namespace(ns, home=home, state_id=state.id)
    assert ns == {"x": 1} and "y" in report.failed and "not one a save writes" in report.failed["y"]
    assert (evil / "evil.bin").is_file()


@pytest.mark.parametrize("bad", BAD_IDS)
def test_malformed_state_ids_are_refused(tmp_path: Path, victim: Path, bad: str) -> None:
    home = tmp_path / "home"
    save_namespace({"x": 1}, home=home)
    for call in (
        lambda: discard_state(home, bad),
        lambda: read_state(home, bad),
        lambda: restore_namespace({}, home=home, state_id=bad),
        lambda: save_namespace({}, home=home, state_id=bad or "."),  # "" there means "a fresh id"
    ):
        with pytest.raises(BadInputError, match="not a valid state id") as err:
            call()
        assert err.value.field == "state_id"
    assert (victim / "precious.txt").is_file() and Path("/etc").is_dir()
    assert len(list_states(home)) == 1


def test_a_linked_state_folder_is_not_a_state(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    save_namespace({"x": 1}, home=home)
    linked_id = "20260101-000000-deadbeef"
    manifest = {"id": linked_id, "path": str(victim), "created": 1.0, "names": ["x"],
                "files": {"x": {"file": "small.bin", "format": "pickle"}}}  # fmt: skip
    (victim / "manifest.json").write_text(json.dumps(manifest))
    link = _state_folder(home, linked_id)
    link.symlink_to(victim, target_is_directory=True)
    assert linked_id not in [s.id for s in list_states(home)]
    with pytest.raises(NotFoundError):
        discard_state(home, linked_id)
    with pytest.raises(NotFoundError):
        restore_namespace({}, home=home, state_id=linked_id)
    assert (victim / "precious.txt").read_text() == "keep me" and link.is_symlink()


def test_discard_of_a_missing_state_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        discard_state(tmp_path / "home", "20260101-000000-deadbeef")


async def test_delete_route_removes_only_the_states_own_folder(jp_fetch: Any, tmp_path: Path, victim: Path) -> None:
    from jupyter_starverse._settings import Settings

    home = Settings.from_env().home
    state = save_namespace({"x": 1}, home=home)
    folder = _state_folder(home, state.id)
    _set_manifest_path(folder, str(victim))
    response = await jp_fetch("jupyter-starverse", "mode", "saved", state.id, method="DELETE")
    assert response.code == 204
    assert not folder.exists()
    assert (victim / "precious.txt").read_text() == "keep me"
