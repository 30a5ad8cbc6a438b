"""``client.serve``: OpenAI-compatible endpoints of store models, here and on the cluster backends.

:meth:`ServeService.start` resolves the model (a store version, an experiment's output, a
folder), picks the engine by what the folder holds (an exported ``model.onnx``: onnxruntime;
else transformers), writes a private run folder under ``<experiments>/.serve/ID`` (spec with the
lineage, a 0600 token, the log) and starts the server detached (:mod:`._server`) through the
process service; it returns once the endpoint answers. :meth:`render` gives the same endpoint
as a Kubernetes Deployment + Service or a Slurm batch script (``LaunchBackend.render_endpoint``).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._format import html_table, pretty_text
from jupyter_starverse._procs import pid_alive
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import write_atomic
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.costs import Cost, NodeInterval, PriceTable, job_cost
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, ConflictError
from jupyter_starverse.export import GRAPH
from jupyter_starverse.feedback import EndpointTarget, resolve_model
from jupyter_starverse.jobmodel import ENGINES, SERVE_PORT, EndpointSpec, JobSpec, LaunchBackend

from ._engines import engine_for
from ._process import Processes, ProcessFolder

__all__ = ["Endpoint", "EndpointList", "ServeLineage", "ServeService"]

_LINEAGE = "starverse-lineage.json"
_REPORT = "export_report.json"


@dataclass(frozen=True)
class ServeLineage:
    """What a served model is: its store version, its export report (parity, quantization loss), its training."""

    model: str
    commit: str | None = None
    export: dict[str, Any] | None = None
    training: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "commit": self.commit, "export": self.export, "training": self.training}

    def lines(self) -> list[str]:
        out = [f"store version: {self.model}" + (f" (commit {self.commit[:12]})" if self.commit else "")]
        if self.export:
            e = self.export
            out.append(f"export: {e.get('format')} of {e.get('source')} ({e.get('state')})")
            for g in e.get("graphs", []):
                out.append(
                    f"  {g.get('graph')}: greedy agreement {g.get('greedy_agreement')}, "
                    f"perplexity change {g.get('perplexity_change')}, max |logit diff| {g.get('max_abs_logit_diff')}"
                )
        if self.training:
            t = self.training
            out.append(f"training: {t.get('recipe') or t.get('objective') or '?'} on {t.get('base_model')} "
                       f"(job {t.get('job_id')})")  # fmt: skip
        return out


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lineage_of(folder: Path, model: str, commit: str | None) -> ServeLineage:
    """Lineage of a model folder: ``starverse-lineage.json`` (a recipe's or an export's) and ``export_report.json``."""
    record = _read(folder / _LINEAGE) or {}
    report = _read(folder / _REPORT)
    export = None
    training: dict[str, Any] | None = record or None
    if record.get("kind") == "export" or report is not None:
        figures = (report or {}).get("figures") or []
        keep = ("graph", "greedy_agreement", "perplexity_change", "max_abs_logit_diff", "ms_per_token", "bytes")
        export = {
            "format": record.get("format") or (report or {}).get("format"),
            "source": record.get("source") or (report or {}).get("model"),
            "source_commit": record.get("source_commit"),
            "state": (report or {}).get("state"),
            "report": _REPORT if report is not None else None,
            "graphs": [{k: f.get(k) for k in keep} for f in figures if isinstance(f, dict)],
        }
        parent = record.get("parent")
        training = parent if isinstance(parent, dict) else None
    return ServeLineage(model, commit, export, training)


@dataclass(frozen=True)
class Endpoint:
    """One served model: where it answers, its state and its lineage."""

    id: str
    model: str
    name: str
    engine: str
    state: str  # starting | running | stopped | exited | elsewhere
    url: str | None
    port: int | None
    pid: int | None
    started_at: float
    folder: str
    log: str
    token_file: str
    lineage: ServeLineage
    host: str = "127.0.0.1"
    stopped_at: float | None = None
    cost: Cost | None = None  # the meter so far: a CPU node of this host at the price table's rate

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "name": self.name,
            "engine": self.engine,
            "state": self.state,
            "url": self.url,
            "port": self.port,
            "pid": self.pid,
            "host": self.host,
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "folder": self.folder,
            "log": self.log,
            "token_file": self.token_file,
            "lineage": self.lineage.to_json(),
            "cost": self.cost.to_json() if self.cost is not None else None,
        }

    def __str__(self) -> str:
        lines = [f"{self.id}: {self.model} ({self.engine}) {self.state}" + (f" at {self.url}" if self.url else "")]
        if self.state == "running":
            lines.append(f"  token: {self.token_file} (Authorization: Bearer ...); model name {self.name!r}")
        lines += [f"  {line}" for line in self.lineage.lines()]
        if self.cost is not None:
            lines.append(f"  cost: {self.cost}")
        lines.append(f"  log: {self.log}")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class EndpointList:
    rows: tuple[Endpoint, ...] = field(default_factory=tuple)

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.rows]

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        if not self.rows:
            return "no endpoints (start one with `starverse serve MODEL`)"
        head = ("ID", "MODEL", "ENGINE", "STATE", "URL", "EXPORT", "COST")
        rows = [(e.id, e.model, e.engine, e.state, e.url or "-", (e.lineage.export or {}).get("format") or "-",
                 e.cost.figure if e.cost is not None else "-") for e in self.rows]  # fmt: skip
        widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
        return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in (head, *rows))

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        head = ["id", "model", "engine", "state", "url"]
        return html_table(head, [[e.id, e.model, e.engine, e.state, e.url or "-"] for e in self.rows])


class ServeService:
    """Endpoints of this host (``ls``/``stop`` see those every process started) and their cluster renderings."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        *,
        lineage: Callable[[str], Any] | None = None,
        prices: Callable[[], PriceTable] | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self._prices = prices  # the price table in force (``client.prices``): the cost meter of each endpoint
        self.procs = Processes(Path(settings.experiments) / ".serve", "serve")
        self._lineage = lineage

    # -- what a model is ---------------------------------------------------------------------------
    def lineage(self, model: str, folder: Path | None = None) -> ServeLineage:
        folder = folder or resolve_model(self.settings, self.catalog, model)
        commit = self.catalog.status(model).commit if model.startswith("hf:") else None
        return lineage_of(folder, model, commit)

    # -- local endpoints ---------------------------------------------------------------------------
    def start(
        self,
        model: str,
        *,
        engine: str = "auto",
        port: int = 0,
        host: str = "127.0.0.1",
        token: str | None = None,
        name: str | None = None,
        idle_exit: float = 0.0,
        max_tokens: int = 512,
        threads: int = 1,
        timeout: float = 120.0,
    ) -> Endpoint:
        """Serve ``model`` on this host; returns once ``/health`` answers (or says why it could not start)."""
        if engine not in ("auto", *ENGINES):
            raise BadInputError(f"unknown engine {engine!r}", field="engine", hint=f"auto or {', '.join(ENGINES)}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise BadInputError("port must be 0..65535", field="port", hint="0 picks a free port")
        if not 1 <= max_tokens <= 32768:
            raise BadInputError("max_tokens must be 1..32768", field="max_tokens", hint="e.g. 512")
        if not 1 <= threads <= 256:
            raise BadInputError("threads must be 1..256", field="threads", hint="e.g. 1")
        if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):  # noqa: S104 - an explicit choice
            raise BadInputError(f"host {host!r} is not a listening address", field="host", hint="127.0.0.1 or 0.0.0.0")
        if token is not None and (not isinstance(token, str) or len(token) < 16 or not token.isprintable()):
            raise BadInputError("a token needs 16 printable characters or more", field="token",
                                hint="leave it out: a random one is made and kept in the run folder")  # fmt: skip
        folder = resolve_model(self.settings, self.catalog, model)
        kind = engine_for(folder, engine)
        served = name or model
        lineage = self.lineage(model, folder)
        f = self.procs.new(Path(folder).name if not model.startswith("hf:") else model[3:].replace("/", "-"), {
            "model": model, "name": served, "folder": str(folder), "engine": kind, "host": host, "port": port,
            "lineage": lineage.to_json(), "user": self.settings.user, "max_tokens": max_tokens,
        })  # fmt: skip
        write_atomic(f.root / "token", (token or secrets.token_urlsafe(32)).encode(), 0o600)
        f.write("info.json", {"model": model, "lineage": lineage.to_json()})
        argv = [
            sys.executable, "-m", "jupyter_starverse.serve._server", "--model-path", str(folder), "--name", served,
            "--engine", kind, "--host", host, "--port", str(port), "--token-file", str(f.root / "token"),
            "--run-dir", str(f.root), "--info", str(f.root / "info.json"), "--idle-exit", str(idle_exit),
            "--max-tokens", str(max_tokens), "--threads", str(threads),
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        self.procs.start(f, argv, env=env)
        return self._wait_ready(f, timeout)

    def _wait_ready(self, f: ProcessFolder, timeout: float) -> Endpoint:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ep = f.read("endpoint.json")
            if ep.get("port"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{ep['port']}/health", timeout=5) as r:
                        if r.status == 200:
                            return self._view(f)
                except OSError:
                    pass
            if f.alive() is False:
                self.procs.stop(f, reason="exited before it served")
                raise BackendUnavailableError(
                    f"the endpoint exited before it served: {f.log_tail(5) or 'no output'}", hint=f"see {f.log}"
                )
            time.sleep(0.1)
        self.procs.stop(f, reason="not ready in time")
        raise BackendUnavailableError(f"the endpoint did not answer within {timeout:g} s", hint=f"see {f.log}")

    def _view(self, f: ProcessFolder) -> Endpoint:
        spec, ep, stopped = f.read("spec.json"), f.read("endpoint.json"), f.read("stopped.json")
        rec = f.record()
        alive = f.alive()
        if alive is None:
            state = "elsewhere"
        elif alive:
            state = "running" if ep.get("port") else "starting"
        else:
            state = "stopped" if stopped else "exited"
        raw = spec.get("lineage")
        lin: dict[str, Any] = raw if isinstance(raw, dict) else {}
        lineage = ServeLineage(str(lin.get("model") or spec.get("model")), lin.get("commit"), lin.get("export"),
                               lin.get("training"))  # fmt: skip
        port = ep.get("port") if isinstance(ep.get("port"), int) else None
        host = str(spec.get("host") or "127.0.0.1")
        url_host = "127.0.0.1" if host in ("0.0.0.0", "localhost") else host  # noqa: S104
        return Endpoint(
            id=f.id, model=str(spec.get("model")), name=str(spec.get("name") or spec.get("model")),
            engine=str(spec.get("engine")), state=state,
            url=f"http://{url_host}:{port}/v1" if port and state == "running" else None,
            port=port, pid=rec.pid if rec else None, started_at=float(spec.get("created_at") or 0.0),
            folder=str(f.root), log=str(f.log), token_file=str(f.root / "token"), lineage=lineage, host=host,
            stopped_at=stopped.get("at"), cost=self._cost(f, spec, state, stopped),
        )  # fmt: skip

    def _cost(self, f: ProcessFolder, spec: dict[str, Any], state: str, stopped: dict[str, Any]) -> Cost | None:
        """What the endpoint has cost so far: one CPU node (the engines serve on this host's CPUs), on demand."""
        started = spec.get("created_at")
        if self._prices is None or not isinstance(started, int | float):
            return None
        end = stopped.get("at")
        if not isinstance(end, int | float) and state not in ("running", "starting", "elsewhere"):
            try:  # it exited on its own: its log's last write is when it stopped
                end = f.log.stat().st_mtime
            except OSError:
                end = started
        end = max(float(end), float(started)) if isinstance(end, int | float) else None
        job = JobSpec(name="serve", command=("serve",), accelerator="cpu", billing="on_demand")
        return job_cost(job, [NodeInterval(0, float(started), end)], self._prices(), job_id=f.id,
                        user=str(spec.get("user") or "") or None)  # fmt: skip

    def get(self, endpoint_id: str) -> Endpoint:
        return self._view(self.procs.folder(endpoint_id))

    def ls(self, *, all: bool = False) -> EndpointList:
        """This host's endpoints: running ones (``all``: stopped and exited too)."""
        rows = [self._view(f) for f in self.procs.ls()]
        return EndpointList(tuple(e for e in rows if all or e.state in ("running", "starting", "elsewhere")))

    def stop(self, endpoint_id: str) -> Endpoint:
        """Stop an endpoint (SIGTERM, then SIGKILL); its port is free when this returns."""
        f = self.procs.folder(endpoint_id)
        ep = self._view(f)
        if ep.state == "elsewhere":
            raise ConflictError(f"{endpoint_id} runs on another host", hint="stop it from the host that started it")
        self.procs.stop(f)
        rec = f.record()
        deadline = time.monotonic() + 5
        while rec is not None and pid_alive(rec.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._view(f)

    def token(self, endpoint_id: str) -> str:
        """The bearer token of an endpoint (only its owner can read the 0600 file)."""
        f = self.procs.folder(endpoint_id)
        return (f.root / "token").read_text(encoding="utf-8").strip()

    def target(self, endpoint_id: str) -> EndpointTarget:
        """Where a running local endpoint answers, with its token (a chat session talks to it)."""
        ep = self.get(endpoint_id)
        if ep.state != "running" or not ep.url:
            raise BackendUnavailableError(
                f"the endpoint {endpoint_id} is {ep.state}, it answers no chat",
                hint=f"start it again with `starverse serve {ep.model}`; `starverse serve ls` lists the running ones",
            )
        return EndpointTarget(ep.url, self.token(endpoint_id), endpoint_id)

    # -- the cluster backends ----------------------------------------------------------------------
    def spec(
        self,
        model: str,
        *,
        engine: str = "auto",
        accelerator: str = "cpu",
        gpus: int = 1,
        replicas: int = 1,
        token_secret: str = "starverse-serve/token",  # noqa: S107 - a Secret's name and key
        name: str | None = None,
        max_tokens: int = 512,
    ) -> EndpointSpec:
        """The endpoint of a store model for a cluster backend (the model is mounted from the store there)."""
        if not model.startswith("hf:"):
            raise BadInputError(
                "a cluster endpoint serves a store model (every pod mounts the store)", field="model",
                hint="import it first (`starverse store import-model PATH --as ORG/REPO`) and give hf:ORG/REPO@REV",
            )  # fmt: skip
        folder = self.catalog.mount(model)
        if engine == "auto":
            has_graph = (folder / GRAPH).is_file()
            engine = "onnxruntime" if has_graph else ("vllm" if accelerator != "cpu" else "transformers")
        if engine not in ENGINES:
            raise BadInputError(f"unknown engine {engine!r}", field="engine", hint=f"auto or {', '.join(ENGINES)}")
        if engine == "vllm" and accelerator == "cpu":
            raise BadInputError("vLLM serves on GPUs", field="engine", hint="give --gpu TYPE, or --engine transformers")
        if engine == "onnxruntime" and not (folder / GRAPH).is_file():
            raise BadInputError(f"{model} is not an ONNX export", field="engine", hint="export it, or use transformers")
        if not 1 <= replicas <= 64 or not 1 <= gpus <= 8:
            raise BadInputError("replicas 1..64, gpus 1..8", field="replicas", hint="e.g. --replicas 2 --gpus 1")
        secret, _, key = token_secret.partition("/")
        if not secret or not key:
            raise BadInputError("the token secret is NAME/KEY", field="token_secret", hint="e.g. starverse-serve/token")
        base = model[3:].split("@")[0].split("/")[-1].lower()
        base = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in base).strip("-")[:40] or "model"
        return EndpointSpec(
            name=f"serve-{base}", model=model, model_path=str(folder), engine=engine, accelerator=accelerator,
            gpus=gpus if accelerator != "cpu" else 1, replicas=replicas, port=SERVE_PORT, token_secret=token_secret,
            token_file=f"{self.settings.experiments}/.serve/tokens/{base}", max_tokens=max_tokens, served_name=name,
        )  # fmt: skip

    def render(self, spec: EndpointSpec, backend: LaunchBackend, *, output: str = "yaml") -> str:
        """``spec`` as ``backend`` runs it (Kubernetes: Deployment + Service; Slurm: a batch script)."""
        return backend.render_endpoint(spec, output=output)
