"""Kubernetes names from any user input: valid, stable and collision-free.

Invariants (tested over generated inputs):

* :func:`dns_label` always returns a DNS-1035 label (also a DNS-1123 label and subdomain):
  lower-case letters, digits and ``-``, starting with a letter, ending with a letter or
  digit, at most ``max_len`` characters. Service names need the stricter DNS-1035 form.
* It is stable: the same input gives the same output in every process (no randomness,
  no ``hash()``), so a name can be recomputed instead of stored.
* It is collision-free: an input that is already a valid label without a trailing hash
  part is returned unchanged; any other input gets ``-<10 hex of sha256(input)>``
  appended. Unchanged outputs never end in such a part, so the two branches cannot meet,
  and two changed inputs only meet on a 40-bit hash collision.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time

__all__ = ["HASH_LEN", "MAX_JOB_ID", "dns_label", "is_dns_label", "label_value", "make_job_id"]

HASH_LEN = 10
#: Job ids leave room for ``-<index>`` pod hostnames (<= 63) and ``-warmup``/``-node-0`` suffixes.
MAX_JOB_ID = 49
_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_HASHED = re.compile(rf"-[0-9a-f]{{{HASH_LEN}}}$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns_label(name: str, max_len: int = 63) -> bool:
    """True when ``name`` is a DNS-1035 label of at most ``max_len`` characters."""
    return len(name) <= max_len and bool(_LABEL.match(name))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LEN]


def dns_label(text: str, *, max_len: int = 63) -> str:
    """A DNS-1035 label for ``text`` (see the module docstring for the invariants)."""
    if max_len < HASH_LEN + 2:
        raise ValueError(f"max_len must be at least {HASH_LEN + 2}")
    if is_dns_label(text, max_len) and not _HASHED.search(text):
        return text
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not slug or not slug[0].isalpha():
        slug = "x-" + slug if slug else "x"
    keep = max_len - HASH_LEN - 1
    slug = slug[:keep].rstrip("-")
    return f"{slug}-{_digest(text)}"


def make_job_id(name: str, *, now: float | None = None, token: str | None = None) -> str:
    """A new job id: ``<label of name>-<yymmdd-hhmmss>-<6 hex>``, sortable and unique.

    The id is also the name of every Kubernetes object of the job, so it is a DNS label
    of at most :data:`MAX_JOB_ID` characters.
    """
    stamp = time.strftime("%y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    token = token or secrets.token_hex(3)
    tail = f"-{stamp}-{token}"
    return dns_label(name, max_len=MAX_JOB_ID - len(tail)) + tail


def label_value(text: str) -> str:
    """A valid label value for ``text`` (<= 63 characters; hashed when it had to change)."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    return dns_label(text, max_len=63)
