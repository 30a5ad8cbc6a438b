"""The ``.svpipeline`` document: nodes (catalog entries and steps) and the edges between them.

A pipeline file is plain JSON, written with sorted keys and two-space indents so it diffs well::

    {"version": 1, "name": "sft", "backend": "local",
     "nodes": [{"id": "data", "kind": "dataset", "params": {"ref": "tiny@v1"}, "position": {"x": 0, "y": 0}},
               {"id": "train", "kind": "train", "params": {"nodes": 2, "template": "ddp"}, ...}],
     "edges": [{"source": "data", "target": "train"}]}

An edge from a ``dataset`` or ``model`` node to a step mounts that entry in the step's job; an
edge from a step to a step makes the second wait until the first succeeded. Everything here is
pure: no catalog, backend or file is read.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_starverse._inputs import PATH_MAX, encodable
from jupyter_starverse.errors import BadInputError

__all__ = ["ENTRY_KINDS", "EVAL_KINDS", "FORMAT_VERSION", "JOB_KINDS", "PREP_STEPS", "STEP_KINDS", "Edge", "Node",
           "Pipeline", "pinned_ref"]  # fmt: skip

FORMAT_VERSION = 1
#: Nodes that stand for a catalog entry (mounted by the steps they feed).
ENTRY_KINDS = ("dataset", "model")
#: Nodes that run as a job: a script with a parallelism template, or a recipe of ``client.recipes``.
JOB_KINDS = ("train", "recipe")
#: Steps that make a model (an ``eval`` step after one scores its output).
EVAL_KINDS = JOB_KINDS
#: Steps: the jobs, data preparation (``client.data``), which runs in the workspace and writes
#: a new dataset version that the steps after it mount, and evaluation (``client.evals``), which
#: scores a model (a model entry, or the output of the training step before it) on a dataset.
STEP_KINDS = (*JOB_KINDS, "prep", "eval")
#: The data preparation steps that write a new version.
PREP_STEPS = ("scan", "clean", "dedup", "score")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_MAX_NODES = 200
#: More edges than a canvas of 200 nodes draws by hand (each node fed by 10 others).
_MAX_EDGES = 2000
#: Longest string parameter (a script path, an argument, an env value); the longest list / object.
_MAX_PARAM_TEXT = PATH_MAX
_MAX_ITEMS = 256
_MAX_POSITION = 1e9
_BACKENDS = ("local", "kubernetes", "slurm")

# What a train node's params may hold, with the JSON type each takes.
TRAIN_PARAMS: dict[str, tuple[type, ...]] = {
    "script": (str,),
    "args": (list,),
    "template": (str,),
    "nodes": (int,),
    "gpus_per_node": (int,),
    "gpu": (str,),
    "data_parallel": (int,),
    "tensor_parallel": (int,),
    "pipeline_parallel": (int,),
    "steps": (int,),
    "hours": (int, float),
    "budget": (int, float, str),
    "billing": (str,),
    "backend": (str,),
    "env": (dict,),
    "secrets": (dict,),  # NAME -> env:VAR | file:/PATH | secret-name/key, resolved where the step's job starts
    "experiment": (str,),
}
# An entry: the name the user picked (``corpus`` or ``corpus@1``) and, for a bare name, the exact
# version it was pinned to at the first check or run (``corpus@1``): the steps read that version
# until the user picks another, whatever a data step or a new original adds later.
ENTRY_PARAMS: dict[str, tuple[type, ...]] = {"ref": (str,), "pinned": (str,)}
# A recipe step: the recipe, its parameters, and the job fields of a train step but the script.
RECIPE_PARAMS: dict[str, tuple[type, ...]] = {
    **{k: v for k, v in TRAIN_PARAMS.items() if k not in ("script", "args")},
    "recipe": (str,),
    "recipe_params": (dict,),
}
# A data preparation step: the step, its options, and where it runs: ``backend`` (the pipeline's
# unless set) and ``shards`` (N or "NxP" ranks; unset: one). On local without shards it runs in
# the driver's process; anywhere else as a job (pipelines/_prep.py).
PREP_PARAMS: dict[str, tuple[type, ...]] = {"step": (str,), "options": (dict,), "backend": (str,),
                                            "shards": (int, str)}  # fmt: skip
# An evaluation step: the task and fields of ``starverse eval``, and where it runs (``backend``: the
# pipeline's unless set; on local it runs in the driver's process, anywhere else as a job).
EVAL_PARAMS: dict[str, tuple[type, ...]] = {"task": (str,), "input_field": (str,), "target_field": (str,),
                                            "limit": (int,), "backend": (str,), "gpu": (str,),
                                            "experiment": (str,)}  # fmt: skip


def pinned_ref(ref: str, pinned: object) -> str | None:
    """``pinned`` when it is a version of the bare name ``ref`` (``corpus`` -> ``corpus@1``), else None:
    a pin of another name (the user picked a different entry since) or of an explicit version is stale."""
    if not isinstance(pinned, str) or not ref or "@" in ref or not pinned.startswith(ref + "@"):
        return None
    return pinned if len(pinned) > len(ref) + 1 else None


def _bad(where: str, why: str, hint: str | None = None, *, field_name: str = "pipeline") -> BadInputError:
    return BadInputError(f"{where}: {why}", field=field_name, hint=hint)


@dataclass(frozen=True)
class Node:
    """One box on the canvas: a catalog entry (``dataset``/``model``) or a step (``train``)."""

    id: str
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    position: tuple[float, float] = (0.0, 0.0)

    @property
    def is_step(self) -> bool:
        """True when the node runs (a job, or data preparation)."""
        return self.kind in STEP_KINDS

    @property
    def entry_ref(self) -> str:
        """What an entry node mounts: its pinned ``NAME@VERSION`` when ``ref`` is a bare name it pins, else ``ref``."""
        ref = str(self.params.get("ref") or "")
        return pinned_ref(ref, self.params.get("pinned")) or ref

    @property
    def is_job(self) -> bool:
        """True when the node runs as a job on a backend."""
        return self.kind in JOB_KINDS

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "params": dict(self.params),
            "position": {"x": self.position[0], "y": self.position[1]},
        }

    @classmethod
    def from_json(cls, data: Any, index: int) -> Node:
        where = f"nodes[{index}]"
        if not isinstance(data, Mapping):
            raise _bad(where, f"expected an object, got {type(data).__name__}", 'e.g. {"id": "train", "kind": "train"}')
        unknown = sorted(set(data) - {"id", "kind", "params", "position"})
        if unknown:
            raise _bad(where, f"unknown key(s) {', '.join(unknown)}", "a node has id, kind, params and position")
        node_id = data.get("id")
        if not isinstance(node_id, str) or not _ID_RE.match(node_id):
            raise _bad(where, f"id {node_id!r} is not valid", "use 1-63 letters, digits, '_' or '-'")
        kind = data.get("kind")
        if kind not in ENTRY_KINDS + STEP_KINDS:
            raise _bad(f"node {node_id}", f"kind {kind!r} is unknown",
                       f"use one of {', '.join(ENTRY_KINDS + STEP_KINDS)}")  # fmt: skip
        params = data.get("params", {})
        if not isinstance(params, Mapping):
            raise _bad(f"node {node_id}", "params must be an object", 'e.g. {"nodes": 2}')
        allowed = {"train": TRAIN_PARAMS, "recipe": RECIPE_PARAMS, "prep": PREP_PARAMS,
                   "eval": EVAL_PARAMS}.get(kind, ENTRY_PARAMS)  # fmt: skip
        for key, value in params.items():
            if key not in allowed:
                raise _bad(f"node {node_id}", f"unknown parameter {key!r}", f"known: {', '.join(sorted(allowed))}")
            ok = value is None or (isinstance(value, allowed[key]) and not isinstance(value, bool))
            if not ok:
                raise _bad(f"node {node_id}", f"{key} has the wrong type ({type(value).__name__})",
                           f"{key} takes {' or '.join(t.__name__ for t in allowed[key])}")  # fmt: skip
            _check_size(node_id, key, value)
        position = data.get("position") or {}
        if not isinstance(position, Mapping):
            raise _bad(f"node {node_id}", "position must be an object {x, y}", 'e.g. {"x": 0, "y": 0}')
        xy = (position.get("x", 0), position.get("y", 0))
        if not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= _MAX_POSITION
            and math.isfinite(v)
            for v in xy
        ):  # fmt: skip
            raise _bad(f"node {node_id}", f"position x and y must be numbers within +-{_MAX_POSITION:g}",
                       'e.g. {"x": 0, "y": 0}')  # fmt: skip
        return cls(node_id, kind, {k: v for k, v in params.items() if v is not None}, (float(xy[0]), float(xy[1])))


def _check_size(node_id: str, key: str, value: Any) -> None:
    """A parameter's strings are UTF-8 and at most a path long; its lists and objects are small."""
    where = f"node {node_id}"
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(where, f"{key} must be a finite number", f"give {key} as a plain number")
    if isinstance(value, (list, dict)) and len(value) > _MAX_ITEMS:
        raise _bad(where, f"{key} has {len(value)} items; at most {_MAX_ITEMS}", f"shorten {key}")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    texts = [value] if isinstance(value, str) else [str(v) for pair in items for v in pair]
    for text in texts:
        if len(text) > _MAX_PARAM_TEXT:
            raise _bad(where, f"{key} holds a text of {len(text):,} characters; at most {_MAX_PARAM_TEXT}",
                       f"shorten {key}")  # fmt: skip
        if not encodable(text):
            raise _bad(where, f"{key} is not valid UTF-8 (a lone surrogate)", "remove unpaired surrogates")


@dataclass(frozen=True)
class Edge:
    """``source`` feeds ``target``: a mount (entry -> step) or a dependency (step -> step)."""

    source: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target}


@dataclass(frozen=True)
class Pipeline:
    """A whole ``.svpipeline`` document; structure checked on construction (ids, edges, no cycle)."""

    name: str
    nodes: tuple[Node, ...] = ()
    edges: tuple[Edge, ...] = ()
    backend: str = "local"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200:
            raise _bad("name", "give the pipeline a name (at most 200 characters)", field_name="name")
        if self.backend not in _BACKENDS:
            raise _bad("backend", f"{self.backend!r} is unknown", f"use one of {', '.join(_BACKENDS)}",
                       field_name="backend")  # fmt: skip
        if len(self.nodes) > _MAX_NODES:
            raise _bad("nodes", f"{len(self.nodes)} nodes; at most {_MAX_NODES}", "split the pipeline")
        if len(self.edges) > _MAX_EDGES:
            raise _bad("edges", f"{len(self.edges)} edges; at most {_MAX_EDGES}", "split the pipeline")
        if not encodable(self.name):
            raise _bad("name", "the name is not valid UTF-8 (a lone surrogate)", "rename the pipeline",
                       field_name="name")  # fmt: skip
        ids = [n.id for n in self.nodes]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise _bad("nodes", f"duplicate id(s) {', '.join(dup)}", "every node needs its own id")
        by_id = self.by_id
        seen: set[tuple[str, str]] = set()
        for edge in self.edges:
            for end in (edge.source, edge.target):
                if end not in by_id:
                    raise _bad(
                        f"edge {edge.source} -> {edge.target}", f"no node {end!r}", "connect nodes of this pipeline"
                    )
            if edge.source == edge.target:
                raise _bad(f"edge {edge.source} -> {edge.target}", "a node cannot feed itself", "remove the edge")
            if not by_id[edge.target].is_step:
                raise _bad(f"edge {edge.source} -> {edge.target}", f"{edge.target} is a {by_id[edge.target].kind}",
                           "only steps take inputs: draw the edge into a training step")  # fmt: skip
            if (edge.source, edge.target) in seen:
                raise _bad(f"edge {edge.source} -> {edge.target}", "drawn twice", "remove the copy")
            seen.add((edge.source, edge.target))
        self.order()  # raises on a cycle

    @functools.cached_property
    def by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    @functools.cached_property
    def _sources(self) -> dict[str, tuple[str, ...]]:
        """Per node, the sources of the edges into it (in edge order): ``inputs`` in O(degree)."""
        into: dict[str, list[str]] = {}
        for e in self.edges:
            into.setdefault(e.target, []).append(e.source)
        return {k: tuple(v) for k, v in into.items()}

    @property
    def steps(self) -> tuple[Node, ...]:
        """The nodes that run as jobs, in an order where every step comes after what it waits for."""
        by_id = self.by_id
        return tuple(by_id[i] for i in self.order() if by_id[i].is_step)

    def inputs(self, node_id: str) -> tuple[Node, ...]:
        """Nodes with an edge into ``node_id``, in edge order."""
        by_id = self.by_id
        return tuple(by_id[s] for s in self._sources.get(node_id, ()))

    def order(self) -> list[str]:
        """Node ids in dependency order (Kahn's algorithm, ties in document order); a cycle is bad input."""
        ids = [n.id for n in self.nodes]
        indegree = dict.fromkeys(ids, 0)
        for e in self.edges:
            indegree[e.target] += 1
        out_of: dict[str, list[str]] = {}
        for e in self.edges:
            out_of.setdefault(e.source, []).append(e.target)
        ready = [i for i in ids if indegree[i] == 0]
        out: list[str] = []
        while ready:
            node = ready.pop(0)
            out.append(node)
            for target in out_of.get(node, ()):
                indegree[target] -= 1
                if indegree[target] == 0:
                    ready.append(target)
        if len(out) != len(ids):
            loop = sorted(set(ids) - set(out))
            raise _bad("edges", f"the steps {', '.join(loop)} wait for each other in a circle",
                       "remove one edge of the circle")  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "backend": self.backend,
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
        }

    def dumps(self) -> str:
        """The file's text: sorted keys, two-space indents, one trailing newline (stable diffs)."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> Pipeline:
        if not isinstance(data, Mapping):
            raise _bad("pipeline", f"expected a JSON object, got {type(data).__name__}",
                       'e.g. {"version": 1, "name": "sft", "nodes": [], "edges": []}')  # fmt: skip
        unknown = sorted(set(data) - {"version", "name", "backend", "nodes", "edges"})
        if unknown:
            raise _bad("pipeline", f"unknown key(s) {', '.join(unknown)}", "keys: version, name, backend, nodes, edges")
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise _bad("version", f"format {version!r} is not supported", f"this version reads format {FORMAT_VERSION}")
        nodes, edges = data.get("nodes", []), data.get("edges", [])
        if not isinstance(nodes, list) or not isinstance(edges, list):
            raise _bad("pipeline", "nodes and edges must be lists", 'e.g. "nodes": [], "edges": []')
        parsed_edges = []
        for i, e in enumerate(edges):
            if (
                not isinstance(e, Mapping)
                or not isinstance(e.get("source"), str)
                or not isinstance(e.get("target"), str)
            ):
                raise _bad(f"edges[{i}]", "expected {source, target} node ids", 'e.g. {"source": "a", "target": "b"}')
            parsed_edges.append(Edge(e["source"], e["target"]))
        return cls(
            name=data.get("name", "pipeline"),
            nodes=tuple(Node.from_json(n, i) for i, n in enumerate(nodes)),
            edges=tuple(parsed_edges),
            backend=data.get("backend") or "local",
        )

    @classmethod
    def loads(cls, text: str) -> Pipeline:
        """Parse a pipeline file's text."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise BadInputError(
                f"not a pipeline file: {e}", field="pipeline", hint="a .svpipeline file is JSON"
            ) from None
        return cls.from_json(data)
