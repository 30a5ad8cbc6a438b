"""The engines an endpoint runs, inside the server process: one decode loop over two runtimes.

``transformers`` (any causal LM folder, PyTorch eager, the KV cache of the model) and
``onnxruntime`` (an exported ``model.onnx`` with its KV-cache signature, run by the export's
:class:`~jupyter_starverse.export.OrtCausalLM`). Both give one ``step(ids, past) -> (logits, past)``;
:func:`generate` turns steps into text pieces (greedy at temperature 0, else seeded sampling)
and stops at EOS, at ``max_tokens`` or at the model's context. Each step holds the engine's lock,
so concurrent requests interleave token by token instead of waiting for a whole answer.
vLLM is not run here: it is its own server, rendered for GPU pods and Slurm jobs.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError
from jupyter_starverse.export import GRAPH, OrtCausalLM

__all__ = ["Engine", "Generation", "engine_for", "load_engine"]


def engine_for(folder: Path, engine: str = "auto") -> str:
    """The engine of ``folder``: ``onnxruntime`` when it holds an exported graph, else ``transformers``."""
    has_graph = (folder / GRAPH).is_file()
    if engine == "auto":
        return "onnxruntime" if has_graph else "transformers"
    if engine == "onnxruntime" and not has_graph:
        raise BadInputError(
            f"{folder} has no {GRAPH}", field="engine", hint="export it first (`starverse export MODEL --format onnx`)"
        )
    if engine == "transformers" and has_graph and not any(folder.glob("*.safetensors")):
        raise BadInputError(
            "this model is an ONNX export (no PyTorch weights)", field="engine", hint="use --engine onnxruntime"
        )
    if engine == "vllm":
        raise MissingDependencyError("vllm", extra="serve", purpose="serving on GPUs (render it for a cluster)")
    return engine


@dataclass
class Generation:
    """What one request produced, filled in while it streams."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "length"
    text: str = ""


class Engine:
    """A loaded model and its tokenizer; subclasses give :meth:`step`."""

    name = "engine"

    def __init__(self, folder: Path, *, threads: int = 1) -> None:
        from transformers import AutoConfig, AutoTokenizer

        self.folder = folder
        self.config = AutoConfig.from_pretrained(folder)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.eos = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        self.context = int(getattr(self.config, "max_position_embeddings", 0) or 0) or None
        self.lock = threading.Lock()

    def step(self, ids: list[int], past: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    # -- prompts ---------------------------------------------------------------------------------
    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt of a chat through the model's own chat template (plain ``role: text`` lines without one)."""
        tok: Any = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
        return self.text_ids(text)

    def text_ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer(text)["input_ids"]]


class TorchEngine(Engine):
    name = "transformers"

    def __init__(self, folder: Path, *, threads: int = 1) -> None:
        super().__init__(folder, threads=threads)
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
        self.model.eval()  # type: ignore[no-untyped-call]
        params = inspect.signature(self.model.forward).parameters
        self._cache = "cache" if "cache" in params else "past_key_values"  # transformers 5 renamed it

    def step(self, ids: list[int], past: Any) -> tuple[Any, Any]:
        import torch

        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids]), use_cache=True, **{self._cache: past})
        return out.logits[0, -1].float().numpy(), out.past_key_values


class OnnxEngine(Engine):
    name = "onnxruntime"

    def __init__(self, folder: Path, *, threads: int = 1) -> None:
        super().__init__(folder, threads=threads)
        self.graph = OrtCausalLM(folder / GRAPH, self.config, threads=threads)

    def step(self, ids: list[int], past: Any) -> tuple[Any, Any]:
        import numpy as np

        logits, present = self.graph.step(np.array([ids], dtype=np.int64), past)
        return logits[0, -1], present


def load_engine(folder: Path, engine: str = "auto", *, threads: int = 1) -> Engine:
    """Load ``folder`` with ``engine`` (``auto``: by what the folder holds)."""
    kind = engine_for(folder, engine)
    try:
        return (OnnxEngine if kind == "onnxruntime" else TorchEngine)(folder, threads=threads)
    except ImportError as e:
        raise MissingDependencyError(e.name or kind, extra="export", purpose=f"serving with {kind}") from e


def generate(
    engine: Engine, prompt: list[int], *, max_tokens: int, temperature: float = 0.0, seed: int = 0, out: Generation
) -> Iterator[str]:
    """Text pieces of the continuation of ``prompt``; ``out`` holds the counts and why it stopped."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out.prompt_tokens = len(prompt)
    tokens: list[int] = []
    sent = ""
    past: Any = None
    step = prompt
    out.finish_reason = "length"
    for _ in range(max_tokens):
        if engine.context is not None and len(prompt) + len(tokens) >= engine.context:
            break
        with engine.lock:
            logits, past = engine.step(step, past)
        logits = np.asarray(logits, dtype=np.float64)
        if temperature > 0:
            z = logits / temperature
            p = np.exp(z - z.max())
            nxt = int(rng.choice(len(p), p=p / p.sum()))
        else:
            nxt = int(np.argmax(logits))
        if nxt in engine.eos:
            out.finish_reason = "stop"
            break
        tokens.append(nxt)
        out.completion_tokens = len(tokens)
        text = str(engine.tokenizer.decode(tokens, skip_special_tokens=True))
        if not text.endswith("\ufffd") and text.startswith(sent) and len(text) > len(sent):
            piece, sent = text[len(sent) :], text
            yield piece
        step = [nxt]
    text = str(engine.tokenizer.decode(tokens, skip_special_tokens=True))
    if len(text) > len(sent) and text.startswith(sent):
        yield text[len(sent) :]
    out.text = text
