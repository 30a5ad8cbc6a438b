"""Data preparation: sensitive-field scan and de-identification, dedup, quality scores.

``DataPrep(settings, catalog)`` is the service (``Starverse.data``): each step reads a store
dataset and writes a new version with provenance and a report. The pieces are usable alone:
:func:`find_pii`, :class:`Deidentifier`, :class:`MinHasher`, :func:`read_docs`.
"""

from __future__ import annotations

from . import _html  # noqa: F401  (registers the HTML view of DataReport)
from ._job import parse_shards
from ._minhash import MinHasher, normalize
from ._models import StaticEncoder, distill_static
from ._pii import ACTIONS, PII_TYPES, SUGGESTED, Deidentifier, Finding, find_pii, id_card_valid, luhn_valid
from ._progress import Progress, StepProgress
from ._read import Doc, Malformed, Source, list_files, read_docs
from ._service import STEPS, DataPrep
from ._types import (
    Cluster,
    DataReport,
    DocRef,
    DupMember,
    Example,
    Histogram,
    PiiType,
    ReportList,
    ReportSummary,
    StepEstimate,
)

__all__ = [
    "ACTIONS",
    "PII_TYPES",
    "STEPS",
    "SUGGESTED",
    "Cluster",
    "DataPrep",
    "DataReport",
    "Deidentifier",
    "Doc",
    "DocRef",
    "DupMember",
    "Example",
    "Finding",
    "Histogram",
    "Malformed",
    "MinHasher",
    "PiiType",
    "Progress",
    "ReportList",
    "ReportSummary",
    "Source",
    "StepEstimate",
    "StaticEncoder",
    "StepProgress",
    "distill_static",
    "find_pii",
    "id_card_valid",
    "list_files",
    "luhn_valid",
    "normalize",
    "parse_shards",
    "read_docs",
]
