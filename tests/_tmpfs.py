"""A real, small file system to fill up (a 4 MiB tmpfs): disk-full tests of the store and data steps.

Mounting needs root and mount(8); the tests that use it are skipped, visibly, elsewhere.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real file system of 4 MiB (a tmpfs; needs root), to fill up."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if os.geteuid() != 0 or mounted.returncode != 0:
        pytest.skip("needs root and mount(8) for a 4 MiB tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Write a file into ``where`` until the file system is full; the file (remove it to free space)."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler
