"""The modes of what the project writes in a run folder: those of the folder, never the umask's."""

from __future__ import annotations

import stat
from pathlib import Path

from jupyter_starverse._volume import GROUP, PRIVATE, PUBLIC, Modes

__all__ = ["folder_modes"]


def _shared(folder: Path) -> bool:
    """True when ``folder`` is setgid: the experiments root is shared by a group (docs/sharing.md)."""
    try:
        return bool(Path(folder).stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def _existing(path: Path) -> Path:
    p = Path(path)
    while not p.is_dir() and p.parent != p:
        p = p.parent
    return p


def folder_modes(folder: Path) -> Modes:
    """The modes of what is written in ``folder``: never more open than the folder itself.

    A setgid or group-readable folder (group mode) gives ``GROUP`` (2770 / 0640), a folder
    others may read gives ``PUBLIC`` (an older or cluster run folder), anything else ``PRIVATE``
    (0700 / 0600). The umask plays no part.
    """
    try:
        mode = _existing(folder).stat().st_mode
    except OSError:
        return PRIVATE
    if mode & stat.S_ISGID or (mode & 0o050 == 0o050 and not mode & 0o005):
        return GROUP
    if mode & 0o005 == 0o005:
        return PUBLIC
    return PRIVATE
