"""The fp32 graph of a model folder, kept for reuse, and the folder an export sends to the store.

Tracing is most of a small model's export, so each export writes beside its fp32 graph the key of
what the graph was made from (:func:`graph_key`: the config and weight files and the exporter's
package versions); a later export of the same files copies that graph (:func:`reuse_graph`) instead
of tracing again. :func:`package` assembles the store folder: the graph files, then the source's
tokenizer and configs (never its weights).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ._onnx import GRAPH

__all__ = ["GRAPH_KEY", "graph_key", "graph_size", "package", "reuse_graph"]

_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".data")

#: Beside an export's fp32 graph: what it was made from (:func:`graph_key`), so a later export reuses it.
GRAPH_KEY = "graph_key.json"
#: Raised when :func:`export_graph` makes another graph from the same model: older graphs are not reused.
_GRAPH_VERSION = 1


def graph_key(source: Path) -> str:
    """What the fp32 graph of ``source`` depends on: its config and weight files (path, size, mtime)
    and the versions of the exporter's packages."""
    from importlib import metadata

    folder = source.resolve()
    files = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.iterdir()
        if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    )
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "onnx", "onnxscript"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    record = {"graph": _GRAPH_VERSION, "folder": str(folder), "files": files, "versions": versions}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def reuse_graph(exports: Path, key: str, out_dir: Path) -> str | None:
    """Copy into ``out_dir`` the fp32 graph an earlier export made from the same key; its export id."""
    try:
        earlier = sorted(exports.glob(f"*/onnx/{GRAPH_KEY}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for record in earlier:
        try:
            if json.loads(record.read_text(encoding="utf-8")).get("key") != key:
                continue
        except (OSError, ValueError, AttributeError):
            continue
        folder = record.parent
        if not (folder / GRAPH).is_file():
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            for item in folder.iterdir():
                if item.name == GRAPH_KEY or not item.is_file() or item.is_symlink():
                    continue
                shutil.copy2(item, out_dir / item.name)  # a copy: onnx refuses external data with two links
        except OSError:
            shutil.rmtree(out_dir, ignore_errors=True)
            continue
        return folder.parent.name
    return None


def graph_size(graph: Path) -> int:
    return sum(p.stat().st_size for p in graph.parent.iterdir() if p.name.startswith(GRAPH))


def package(source: Path, graph: Path, out: Path) -> None:
    """The folder that goes to the store: the graph, then the tokenizer and configs of ``source``."""
    out.mkdir(parents=True, exist_ok=True)
    for f in graph.parent.iterdir():
        if f.name.startswith(GRAPH):
            shutil.copy2(f, out / f.name)
    for f in source.iterdir():
        if f.is_file() and not f.name.endswith(_WEIGHTS) and not f.name.startswith("."):
            shutil.copy2(f, out / f.name)
