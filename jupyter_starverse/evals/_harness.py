"""Standard tasks through lm-evaluation-harness (``pip install 'jupyter_starverse[harness]'``).

Two ways in, both over local files only (the harness runs with the Hub and datasets offline):

- :func:`render_task`: one of our task kinds over the examples of a labelled store dataset becomes
  an lm-eval YAML task (``dataset_path: json`` over a JSONL of those examples; classification as
  ``multiple_choice`` over the labels, extraction / QA / generation as ``generate_until`` scored by
  exact match, perplexity as ``loglikelihood_rolling``), so the harness scores the same examples as
  our own runner and the report keeps a task a user can rerun with ``lm_eval --include_path``;
- :func:`load_task_file`: a team's own lm-eval task YAML (a local copy of a standard benchmark, say),
  refused when its data is not on local disk.

The harness calls the model through our :class:`~._predict.Predictor` (transformers, or
onnxruntime for an exported version) wrapped as an ``lm_eval`` LM, so an exported graph is scored
by the same tasks. Its requests are cached in a SQLite file as they are answered (lm-eval's own
request cache): a killed run asked again answers only what is left. Its per-example samples become
the rows of our predictions file (input, expected, predicted, correct).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError

from ._predict import Predictor

__all__ = [
    "LOCAL_LOADERS",
    "HarnessTask",
    "harness_metrics",
    "harness_rows",
    "load_task_file",
    "render_task",
    "run_harness",
    "write_examples",
]

#: ``dataset_path`` values that read local files with datasets' packaged builders (no download).
LOCAL_LOADERS = ("json", "csv", "parquet", "text", "arrow")
#: How each of our task kinds asks the model.
OUTPUT_TYPE = {"classification": "multiple_choice", "extraction": "generate_until", "qa": "generate_until",
               "generation": "generate_until", "perplexity": "loglikelihood_rolling"}  # fmt: skip
#: The task kind of a team's own lm-eval task in its report.
FILE_TASK = "lm-eval"


@dataclass(frozen=True)
class HarnessTask:
    """An lm-eval task: its name, its YAML text, the folder lm-eval indexes it from, its output type."""

    name: str
    yaml: str
    output_type: str
    folder: Path | None = None  # a team's file: its own folder (includes, utils.py); None: ours, written per run
    data_files: tuple[str, ...] = ()

    def digest(self) -> str:
        """The task's text and its data files' bytes: the version of a team's task in its report."""
        h = hashlib.sha256(self.yaml.encode())
        for name in self.data_files:
            try:
                h.update(Path(name).read_bytes())
            except OSError:
                h.update(name.encode())
        return h.hexdigest()[:12]


def write_examples(path: Path, examples: Sequence[Any]) -> Path:
    """The examples (``idx``, ``input``, ``expected``) as the JSONL a rendered task reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"idx": ex.idx, "input": ex.input, "target": ex.expected} for ex in examples]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def render_task(
    name: str,
    data_file: Path,
    *,
    task: str,
    prompt: str = "{input}",
    labels: Sequence[str] = (),
    max_new_tokens: int = 32,
) -> HarnessTask:
    """Our task kind over a JSONL of ``{"input", "target"}`` rows as an lm-eval YAML task.

    Values are JSON-quoted (valid YAML); the prompt's ``{input}`` becomes ``{{input}}``.
    """
    if task not in OUTPUT_TYPE:
        raise BadInputError(f"unknown task {task!r}", field="task", hint=f"one of {', '.join(OUTPUT_TYPE)}")
    if not name.replace("_", "").replace("-", "").isalnum():
        raise BadInputError(f"{name!r} cannot name an lm-eval task", field="task", hint="letters, digits, - and _")
    if "{input}" not in prompt:
        raise BadInputError(
            "the prompt template has no {input}", field="prompt", hint="e.g. 'Review: {input}\\nLabel:'"
        )
    if "{{" in prompt or "{%" in prompt or "{#" in prompt:
        raise BadInputError("the prompt holds template braces", field="prompt", hint="write {input} and plain text")
    text = prompt.replace("{input}", "{{input}}")
    out = OUTPUT_TYPE[task]
    q = json.dumps
    lines = [
        f"task: {q(name)}",
        "dataset_path: json",
        "dataset_kwargs:",
        f"  data_files: {{test: [{q(str(data_file))}]}}",
        "test_split: test",
        f"output_type: {out}",
    ]
    if task == "classification":
        if len(labels) < 2:
            raise BadInputError("classification needs at least two labels", field="labels", hint="--labels A,B")
        lines += [
            f"doc_to_text: {q(text)}",
            f"doc_to_choice: {q(list(labels))}",
            f"doc_to_target: {q('{{' + q(list(labels)) + '.index(target)}}')}",
            'target_delimiter: " "',  # the continuation is " LABEL", as our own runner scores it
            "metric_list:",
            "  - {metric: acc, aggregation: mean, higher_is_better: true}",
        ]
    elif task == "perplexity":
        lines += [
            f"doc_to_text: {q('')}",
            f"doc_to_target: {q(text)}",
            "metric_list:",
            "  - {metric: word_perplexity, aggregation: weighted_perplexity, higher_is_better: false}",
            "  - {metric: bits_per_byte, aggregation: bits_per_byte, higher_is_better: false}",
        ]
    else:
        lines += [
            f"doc_to_text: {q(text)}",
            'doc_to_target: "{{target}}"',
            'target_delimiter: " "',
            "generation_kwargs:",
            '  until: ["\\n"]',
            f"  max_gen_toks: {int(max_new_tokens)}",
            "  do_sample: false",
            "metric_list:",
            "  - {metric: exact_match, aggregation: mean, higher_is_better: true, ignore_case: true,"
            " ignore_punctuation: true}",
        ]
    return HarnessTask(name, "\n".join(lines) + "\n", out, None, (str(data_file),))


class _TaskLoader:
    """YAML as lm-eval reads it: ``!function module.name`` tags are kept as text (not run here)."""

    @staticmethod
    def load(text: str) -> Any:
        import yaml

        class Loader(yaml.SafeLoader):
            pass

        def keep(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> str:
            return f"!{suffix} {getattr(node, 'value', '')}"

        Loader.add_multi_constructor("!", keep)
        return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader subclass)


def _data_names(doc: dict[str, Any]) -> list[str]:
    files = (doc.get("dataset_kwargs") or {}).get("data_files")
    names: list[str] = []
    if isinstance(files, dict):
        for v in files.values():
            names += [v] if isinstance(v, str) else [str(x) for x in v or []]
    elif isinstance(files, str):
        names = [files]
    elif isinstance(files, list):
        names = [str(x) for x in files]
    return names


def load_task_file(path: Path) -> HarnessTask:
    """A team's lm-eval task YAML; its data must be local files (nothing is fetched from a hub)."""
    import yaml

    hint = "give an lm-eval task YAML file (task:, dataset_path:, output_type:, doc_to_text:, ...)"
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
        doc = _TaskLoader.load(text)
        if isinstance(doc, dict) and isinstance(doc.get("include"), str):  # a shared base file beside it
            base = _TaskLoader.load((path.parent / doc["include"]).read_text(encoding="utf-8"))
            doc = {**(base if isinstance(base, dict) else {}), **doc}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BadInputError(f"cannot read the lm-eval task {path}: {e}", field="harness_task", hint=hint) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("task"), str):
        raise BadInputError(f"{path} is not one lm-eval task (no 'task: NAME'; groups are not run here)",
                            field="harness_task", hint=hint)  # fmt: skip
    source = str(doc.get("dataset_path", ""))
    names = _data_names(doc)

    def local(name: str) -> Path | None:
        p = Path(name).expanduser()
        p = p if p.is_absolute() else Path.cwd() / p  # lm-eval (datasets) resolves them from the working folder
        return p if p.exists() else None

    found = [local(n) for n in names]
    if source in LOCAL_LOADERS:
        ok = bool(names) and all(found)
    else:
        ok = local(source) is not None  # a local dataset folder (a script or saved files)
        found = [local(source)]
    if not ok:
        raise BadInputError(
            f"{path}: the task's data ({source or 'no dataset_path'}"
            + (f", {', '.join(names)}" if names else "")
            + ") is not on local disk; nothing is fetched from a hub",
            field="harness_task",
            hint="point dataset_path at json/csv/parquet and dataset_kwargs.data_files at local files",
        )
    return HarnessTask(doc["task"], text, str(doc.get("output_type", "generate_until")), path.parent,
                       tuple(str(p) for p in found if p is not None))  # fmt: skip


def _harness_lm(pred: Predictor, batch: int, say: Callable[[int, int], None]) -> Any:
    """Our predictor as an ``lm_eval`` LM: log-likelihoods and greedy generation, in batches;
    ``say(done, total)`` after each batch (lm-eval hands each kind's requests over at once)."""
    from lm_eval.api.model import LM
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    def encode_pair(context: str, continuation: str) -> tuple[list[int], list[int]]:
        # as lm-eval's HFLM: trailing spaces of the context belong to the continuation
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        return pred.encode(context), pred.encode(continuation)

    class HarnessLM(LM):  # type: ignore[misc]
        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            out: list[tuple[float, bool]] = []
            for at in range(0, len(requests), batch):
                chunk = requests[at : at + batch]
                scores = pred.scored([encode_pair(*r.args) for r in chunk])
                for r, answer in zip(chunk, scores, strict=True):  # cached now: a killed run resumes here
                    self.cache_hook.add_partial("loglikelihood", r.args, answer)
                out += scores
                say(len(out), len(requests))
            return out

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            prefix = pred.eos if pred.eos is not None else pred.pad
            out = []
            for r in requests:
                toks = pred.encode(r.args[0])
                windows = [
                    make_disjoint_window(w)
                    for w in get_rolling_token_windows(toks, prefix, max(2, pred.context), 1)
                ]  # fmt: skip
                out.append(sum(ll for ll, _ in pred.scored(windows)) if windows else 0.0)
                self.cache_hook.add_partial("loglikelihood_rolling", r.args, out[-1])
                say(len(out), len(requests))
            return out

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            out: list[str] = [""] * len(requests)
            done = 0
            groups: dict[str, list[int]] = {}
            for i, r in enumerate(requests):  # one batch per set of generation settings
                groups.setdefault(json.dumps(r.args[1], sort_keys=True, default=str), []).append(i)
            for members in groups.values():
                kw = requests[members[0]].args[1]
                until = kw.get("until") or []
                stops = [until] if isinstance(until, str) else [str(s) for s in until]
                for at in range(0, len(members), batch):
                    idx = members[at : at + batch]
                    toks = pred.generate(
                        [pred.encode(requests[i].args[0]) for i in idx], int(kw.get("max_gen_toks", 256))
                    )
                    for i, t in zip(idx, toks, strict=True):
                        text = pred.decode(t)
                        for stop in stops:
                            if stop and stop in text:
                                text = text.split(stop)[0]
                        out[i] = text
                        self.cache_hook.add_partial("generate_until", requests[i].args, text)
                    done += len(idx)
                    say(done, len(requests))
            return out

    return HarnessLM()


def _first(value: Any) -> Any:
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value


def harness_rows(
    task: HarnessTask, samples: Sequence[dict[str, Any]], *, count: Callable[[str], int] | None = None
) -> list[dict[str, Any]]:
    """lm-eval's logged samples as our predictions rows (idx, input, expected, predicted, correct).

    ``count`` gives the tokens of a perplexity text (all of them are scored after the prefix token).
    """
    rows = []
    for s in samples:
        raw_doc = s.get("doc")
        doc: dict[str, Any] = raw_doc if isinstance(raw_doc, dict) else {}
        args = s.get("arguments") or []
        context = str(_first(args)) if args else ""
        ours = task.folder is None and "input" in doc
        row: dict[str, Any] = {
            "idx": int(doc["idx"]) if ours and "idx" in doc else int(s["doc_id"]),
            "input": str(doc["input"]) if ours else context,
        }
        resps = s.get("filtered_resps") or []
        target = s.get("target")
        if task.output_type == "multiple_choice":
            choices = [str(a[1]).strip() for a in args if isinstance(a, (list, tuple)) and len(a) > 1]
            scores = [float(_first(r)) for r in resps]
            best = max(range(len(scores)), key=lambda k: scores[k]) if scores else 0
            if isinstance(target, int) and 0 <= target < len(choices):
                expected = choices[target]
            else:
                expected = str(_first(target))
            predicted = choices[best] if choices else ""
            row.update(expected=expected, predicted=predicted, correct=predicted == expected,
                       score=scores[best] if scores else None)  # fmt: skip
        elif task.output_type == "loglikelihood_rolling":
            text = context  # the text scored (the prompt applied)
            row.update(expected="", predicted="", nll=-float(_first(resps) or 0.0))
            row["tokens"] = count(text) if count else 0
        else:
            predicted = str(_first(resps) if resps else "").strip()
            row.update(expected=str(_first(target) if target is not None else ""), predicted=predicted)
            metric = next((k for k in ("exact_match", "acc") if k in s), None)
            row["correct"] = bool(float(_first(s[metric])) > 0) if metric else predicted == row["expected"]
        for key, value in s.items():
            if key in ("doc", "doc_id", "arguments", "resps", "filtered_resps", "target", "filter", "metrics"):
                continue
            if key.endswith("_hash") or key == "task_name":
                continue
            if isinstance(value, (int, float, bool)) or (isinstance(value, (list, tuple)) and value):
                row[f"lm_eval_{key}"] = float(_first(value)) if not isinstance(value, bool) else value
        rows.append(row)
    return sorted(rows, key=lambda r: r["idx"])


def harness_metrics(raw: dict[str, Any]) -> dict[str, float]:
    """lm-eval's result of one task (``{"acc,none": 0.5, "acc_stderr,none": ...}``) as report metrics:
    ``lm_eval_acc``; a metric of another filter than ``none`` keeps it: ``lm_eval_exact_match_strict-match``."""
    out = {}
    for key, value in raw.items():
        if "," not in key or "stderr" in key or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        metric, filt = key.split(",", 1)
        out[f"lm_eval_{metric}" + ("" if filt == "none" else f"_{filt}")] = float(value)
    return out


@contextmanager
def offline(cache: Path) -> Iterator[None]:
    """The Hub and datasets offline (read when a library is imported, and at call time), datasets'
    cache in ``cache``; everything restored after."""
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(cache)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    patched: list[tuple[Any, str, Any]] = []
    try:
        import datasets.config as dconf
        import huggingface_hub.constants as hconst

        for mod, name, value in ((dconf, "HF_DATASETS_OFFLINE", True), (dconf, "HF_HUB_OFFLINE", True),
                                 (hconst, "HF_HUB_OFFLINE", True), (dconf, "HF_DATASETS_CACHE", cache)):  # fmt: skip
            if hasattr(mod, name):
                patched.append((mod, name, getattr(mod, name)))
                setattr(mod, name, value)
        yield
    finally:
        for mod, name, value in reversed(patched):
            setattr(mod, name, value)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lm_eval_version() -> str:
    try:
        import lm_eval
    except ImportError as e:
        raise MissingDependencyError(
            e.name or "lm_eval", extra="harness", purpose="standard tasks through lm-eval"
        ) from e
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return str(getattr(lm_eval, "__version__", ""))


def run_harness(
    pred: Predictor,
    task: HarnessTask,
    work: Path,
    *,
    limit: int | None = None,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, Any]]:
    """Run ``task`` on ``pred`` with ``work`` as the run's folder (the task YAML of a rendered task,
    the request cache: a rerun of a killed run answers only what is left, datasets' cache).

    Returns lm-eval's metrics (``lm_eval_*``), our rows, and lm-eval's config of the task.
    """
    lm_eval_version()
    import lm_eval
    from lm_eval.tasks import TaskManager

    work.mkdir(parents=True, exist_ok=True)
    folder = task.folder
    if folder is None:
        folder = work / "task"
        folder.mkdir(exist_ok=True)
        (folder / f"{task.name}.yaml").write_text(task.yaml, encoding="utf-8")
    with offline(work / "datasets"):
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        if task.name not in manager.all_tasks:
            raise BadInputError(f"lm-eval found no task {task.name!r} in {folder}", field="harness_task",
                                hint="check the file's task: name and that lm-eval can read it")  # fmt: skip
        result = lm_eval.simple_evaluate(
            model=_harness_lm(pred, max(1, batch_size), progress or (lambda done, total: None)),
            tasks=[task.name],
            task_manager=manager,
            limit=limit,
            log_samples=True,
            use_cache=str(work / "requests"),
            bootstrap_iters=0,
        )
    if not result or task.name not in result.get("results", {}):
        raise BadInputError(f"lm-eval returned no result for {task.name}", field="harness_task", hint="check the task")
    metrics = harness_metrics(result["results"][task.name])
    rows = harness_rows(task, result.get("samples", {}).get(task.name, []), count=lambda t: len(pred.encode(t)))
    config = result.get("configs", {}).get(task.name, {})
    return metrics, rows, json.loads(json.dumps(config, default=str))
