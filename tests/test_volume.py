import os

import pytest

from jupyter_starverse import _volume as v
from jupyter_starverse.errors import PermissionDeniedError


def test_remove_under_unlinks_a_link_never_its_target(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (root / "a" / "link").symlink_to(outside)
    v.remove_under(root, root / "a" / "link")
    assert not (root / "a" / "link").exists() and (outside / "keep").read_text() == "x"


def test_remove_under_refuses_a_link_above_the_target(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "home"
    (outside / "v").mkdir(parents=True)
    (root / "entry").symlink_to(outside)
    with pytest.raises(PermissionDeniedError):
        v.remove_under(root, root / "entry" / "v")
    assert (outside / "v").is_dir()


def test_open_under_refuses_links_at_every_level(tmp_path):
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (tmp_path / "secret").write_text("s")
    (root / "d" / "f").symlink_to(tmp_path / "secret")
    (root / "l").symlink_to(root / "d")
    for p in (root / "d" / "f", root / "l" / "x"):
        with pytest.raises(PermissionDeniedError):
            os.close(v.open_under(root, p))
    fd = v.open_under(root, root / "d" / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    assert (root / "d" / "new").is_file()


def test_paths_outside_the_root_are_refused(tmp_path):
    from jupyter_starverse.errors import BadInputError

    with pytest.raises(BadInputError):
        v.inside(tmp_path / "root", tmp_path / "other")
    with pytest.raises(BadInputError):
        v.inside(tmp_path / "root", tmp_path / "root" / ".." / "x")


def test_modes_are_set_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        v.make_dir(tmp_path / "a" / "b", v.PUBLIC)
        v.write_atomic(tmp_path / "a" / "b" / "f", b"x", 0o644)
    finally:
        os.umask(old)
    assert oct((tmp_path / "a" / "b").stat().st_mode & 0o7777) == oct(0o755)
    assert oct((tmp_path / "a" / "b" / "f").stat().st_mode & 0o777) == oct(0o644)
