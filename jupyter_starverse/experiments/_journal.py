"""The job index's journal: which run folders were rewritten (see ``_index``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["INDEX_DIR", "WATCHED", "note_change"]

INDEX_DIR = ".jobindex"
_JOURNAL = "changes.log"
#: Files of a run folder a summary is made of; writing one of them is a change.
WATCHED = ("spec.json", "status.json", "kubernetes.json", "slurm.json")


def note_change(path: Path) -> None:
    """Record that ``path`` (a watched file of a run folder) was rewritten; never fails the writer."""
    if path.name not in WATCHED or path.parent.parent.name != "runs":
        return
    root = path.parent.parent.parent.parent  # <experiments>/<experiment>/runs/<id>/<file>
    journal = root / INDEX_DIR / _JOURNAL
    with contextlib.suppress(OSError):
        if not journal.parent.is_dir():
            return  # no index yet: whoever builds it reads every folder anyway
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (str(path.parent.relative_to(root)) + "\n").encode())
        finally:
            os.close(fd)
