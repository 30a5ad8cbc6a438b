"""What can be mounted: datasets and Hugging Face models on the shared store.

``Catalog(settings)`` is the service; everything it knows is stored on the store (see
:mod:`._layout`), so every process and node sees the same catalog.
"""

from __future__ import annotations

from ._catalog import Catalog, check_pull_options
from ._holds import Hold
from ._names import DatasetRef, ModelRef, parse_ref
from ._progress import ProgressCallback, tqdm_callback
from ._seal import StatCheck
from ._sources import REMOTE_SCHEMES, check_source
from ._types import Entry, EntryStatus, FileRecord, HoldInfo, PullProgress, StoreListing, VerifyReport, format_bytes

__all__ = [
    "REMOTE_SCHEMES",
    "check_source",
    "Catalog",
    "DatasetRef",
    "Entry",
    "EntryStatus",
    "FileRecord",
    "Hold",
    "HoldInfo",
    "ModelRef",
    "ProgressCallback",
    "PullProgress",
    "StatCheck",
    "StoreListing",
    "VerifyReport",
    "check_pull_options",
    "format_bytes",
    "parse_ref",
    "tqdm_callback",
]
