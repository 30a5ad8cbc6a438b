"""Tiny pure-Python wheels written by hand (a .dist-info with METADATA, WHEEL and RECORD is enough)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path


def _line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def write_wheel(
    folder: Path, name: str, version: str = "1.0", *, payload: int = 0, requires: tuple[str, ...] = ()
) -> Path:
    """``folder/NAME-VERSION-py3-none-any.whl``: a module ``NAME`` with ``VALUE`` (and ``payload`` bytes of data)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {name + '-' + version!r}\n".encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if payload:
        files[f"{name}/data.bin"] = bytes(range(256)) * (payload // 256)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        record = [_line(arc, data) for arc, data in files.items()] + [f"{info}/RECORD,,"]
        for arc, data in files.items():
            zf.writestr(arc, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def install_in_notebook(target: Path, *wheels: Path) -> None:
    """``%pip install`` into a folder only the "kernel" sees (its sys.path), never the job's Python."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--disable-pip-version-check", "--target", str(target), *map(str, wheels)], check=True)  # fmt: skip
