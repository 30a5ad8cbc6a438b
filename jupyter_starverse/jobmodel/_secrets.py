"""Secrets by reference: what a ``JobSpec.secrets`` value may say, and ``env`` values that look secret.

A job's secrets never travel as values. ``JobSpec.secrets`` maps a variable of the job to a
reference, resolved only where the job starts:

- ``env:VAR``: the variable ``VAR`` of the environment that submits the job;
- ``file:/PATH``: the content of a file that only its owner can read (mode 0600 or 0400);
- ``secret-name/key``: a key of a Kubernetes Secret (on the other backends: the variable of the
  job's own name in the submitting environment).

Pure functions; nothing here reads the environment or a file (``backends/_secrets.py`` does).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SECRET_KINDS", "SecretRef", "looks_secret", "parse_secret_ref", "secret_env_warnings"]

#: ``env`` and ``file`` references, and ``kube`` (a Kubernetes Secret's ``name/key``).
SECRET_KINDS = ("env", "file", "kube")

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KUBE_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/[-._a-zA-Z0-9]+$")
_MAX_PATH = 4096
#: Parts of a variable name that say "this is a secret" (matched between ``_`` or at the ends).
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH", "APIKEY",
                 "PRIVATE", "COOKIE")  # fmt: skip
_NOT_SECRET = ("TOKENIZER", "TOKENIZERS", "TOKENS", "KEYS", "MONKEY", "HOTKEY")
#: A value this long whose characters carry this many bits each looks like a key or a token.
MIN_ENTROPY_LENGTH = 20
MIN_ENTROPY_BITS = 4.0
REF_EXAMPLES = "env:VAR, file:/PATH or secret-name/key"


@dataclass(frozen=True)
class SecretRef:
    """A parsed reference: ``kind`` is one of :data:`SECRET_KINDS`; ``target`` the variable, path or name/key."""

    kind: str
    target: str

    def __str__(self) -> str:
        return self.target if self.kind == "kube" else f"{self.kind}:{self.target}"


def parse_secret_ref(ref: object) -> SecretRef | None:
    """The reference ``ref`` names, or ``None`` when it is not a reference (maybe a value by mistake)."""
    if not isinstance(ref, str):
        return None
    kind, sep, target = ref.partition(":")
    if sep and kind == "env":
        return SecretRef("env", target) if _ENV_RE.match(target) else None
    if sep and kind == "file":
        ok = target.startswith("/") and len(target) <= _MAX_PATH and "\0" not in target
        return SecretRef("file", target) if ok else None
    return SecretRef("kube", ref) if _KUBE_RE.match(ref) else None


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]


def entropy_bits(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character (0 for an empty string)."""
    if not value:
        return 0.0
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_secret(name: str, value: str) -> str | None:
    """Why ``name=value`` looks like a secret (``None`` when it does not)."""
    words = _words(name)
    hits = [w for w in words if w in _SECRET_WORDS and w not in _NOT_SECRET]
    if hits:
        return f"its name has {hits[0]}"
    if len(value) >= MIN_ENTROPY_LENGTH and not value.startswith(("/", "./", "~", "http://", "https://")):
        bits = entropy_bits(value)
        if bits > MIN_ENTROPY_BITS:
            return f"its value looks random ({bits:.1f} bits per character)"
    return None


def secret_env_warnings(env: Mapping[str, str], *, source: str = "--env", flag: str = "--secret") -> tuple[str, ...]:
    """One warning per ``env`` variable that looks like a secret, pointing to ``--secret`` (never the value).

    ``source`` and ``flag`` name the field and its replacement as the user sees them (a pipeline
    step's ``env`` and ``secrets``)."""
    out = []
    for name in sorted(env):
        why = looks_secret(str(name), str(env[name]))
        if why:
            out.append(
                f"{source} {name} looks like a secret ({why}): its value is written into the job's spec, plan and "
                f"manifests; pass it by reference instead, e.g. {flag} {name}=env:{name} (or file:/PATH, or a "
                "Kubernetes secret-name/key)"
            )
    return tuple(out)
