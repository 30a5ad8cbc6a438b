"""A causal LM to one ONNX graph with a KV cache, weight-only INT8/INT4, and an onnxruntime runner.

The graph takes ``input_ids``, ``attention_mask``, ``position_ids`` and
``past_key_values.{i}.key|value`` (``[batch, kv_heads, past, head_dim]``, past may be 0) and
gives ``logits`` and ``present.{i}.key|value``: one graph serves the prompt (prefill, past = 0)
and every generated token (decode, one new token), so generation reuses the cache instead of
re-reading the whole sequence. Exported with ``torch.onnx.export(dynamo=True)`` (opset 18).
Quantization is weight-only: onnxruntime's ``MatMulNBitsQuantizer`` (symmetric, blocks of 32)
replaces each weight MatMul with a ``MatMulNBits`` of 8 or 4 bits: only weights are stored
quantized; by default the kernel quantizes activation blocks to int8 while it multiplies
(``compute="int8"``, the fast CPU path), ``compute="fp32"`` multiplies in float.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from jupyter_starverse.errors import BadInputError, MissingDependencyError

__all__ = ["COMPUTE", "GRAPH", "OrtCausalLM", "export_graph", "load_torch", "quantize_graph"]

P = ParamSpec("P")
R = TypeVar("R")
GRAPH = "model.onnx"
BLOCK_SIZE = 32


def _need(module: str, purpose: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(module.split(".")[0], extra="export", purpose=purpose) from e


_THIRD_PARTY_LOGGERS = ("transformers", "torch", "onnxruntime", "onnxscript", "onnx", "huggingface_hub")


@contextlib.contextmanager
def third_party_quiet() -> Iterator[None]:
    """No warning or log chatter of a library reaches the user during an export (deprecations of
    transformers and torch.onnx, their advice): ours still do, and errors still raise.

    transformers and torch set their loggers' levels when first imported: imported here first
    (an export needs both), or the import inside the export would undo the quiet levels."""
    import importlib.util

    for module in ("torch", "transformers.utils.logging"):
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            _need(module, "export")
    loggers = [logging.getLogger(n) for n in _THIRD_PARTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(?!jupyter_starverse)")  # every module but ours
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def quietly(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run under :func:`third_party_quiet`."""

    @functools.wraps(fn)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        with third_party_quiet():
            return fn(*args, **kwargs)

    return inner


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters print progress and deprecation chatter; our own progress says what happens."""
    loggers = [logging.getLogger(n) for n in ("onnxruntime", "onnxscript", "torch.onnx", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(None):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def load_torch(folder: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a Hugging Face folder, fp32, eval mode, offline."""
    _need("torch", "export")
    transformers = _need("transformers", "export")
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # our own progress says what happens
    try:
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    except Exception as e:  # transformers, safetensors and json raise many kinds for a broken folder
        raise BadInputError(
            f"cannot load the model in {folder}: {type(e).__name__}: {e}",
            hint="export a Hugging Face causal LM folder (config.json, weights, tokenizer), "
            "e.g. a store version pulled with `starverse store pull hf:ORG/NAME` or a recipe's output",
        ) from e
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    model.eval()
    return model, tok


@dataclass(frozen=True)
class CacheShape:
    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: Any) -> CacheShape:
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return cls(int(config.num_hidden_layers), int(getattr(config, "num_key_value_heads", None) or heads), head_dim)

    def input_names(self) -> list[str]:
        return [f"past_key_values.{i}.{k}" for i in range(self.layers) for k in ("key", "value")]

    def output_names(self) -> list[str]:
        return [f"present.{i}.{k}" for i in range(self.layers) for k in ("key", "value")]


def _wrapper(model: Any, shape: CacheShape) -> Any:
    import torch
    from transformers import DynamicCache

    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"

    class WithCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> tuple[Any, ...]:
            cache = DynamicCache(config=self.model.config)
            for i in range(shape.layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_arg: cache},
            )
            present: list[Any] = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return WithCache()


def export_graph(model: Any, out_dir: Path) -> Path:
    """Write ``out_dir/model.onnx`` (+ its external weights) with the KV-cache signature."""
    torch = _need("torch", "export")
    _need("onnxscript", "export")
    from torch.export import Dim

    shape = CacheShape.of(model.config)
    wrapper = _wrapper(model, shape)
    past_len, new_len = 3, 4
    ids = torch.randint(0, int(model.config.vocab_size), (1, new_len))
    mask = torch.ones(1, past_len + new_len, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + new_len).unsqueeze(0)
    past = [torch.zeros(1, shape.kv_heads, past_len, shape.head_dim) for _ in range(2 * shape.layers)]
    limit = int(getattr(model.config, "max_position_embeddings", 4096) or 4096)
    batch, seq, past_dim = Dim("batch", max=1024), Dim("seq", max=limit), Dim("past", max=limit)
    dynamic = {
        "input_ids": {0: batch, 1: seq},
        "attention_mask": {0: batch, 1: Dim("total", max=2 * limit)},
        "position_ids": {0: batch, 1: seq},
        "past": tuple({0: batch, 2: past_dim} for _ in range(2 * shape.layers)),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / GRAPH
    with _quiet():
        torch.onnx.export(
            wrapper,
            (ids, mask, pos, *past),
            str(target),
            input_names=["input_ids", "attention_mask", "position_ids", *shape.input_names()],
            output_names=["logits", *shape.output_names()],
            dynamic_shapes=dynamic,
            dynamo=True,
            opset_version=18,
            external_data=True,
        )
    return target


#: MatMulNBits compute: ``int8`` quantizes each activation block on the fly and uses onnxruntime's
#: integer kernels (accuracy_level 4: 9x faster than fp32 compute for INT8 weights on a 10M model);
#: ``fp32`` dequantizes the weights and multiplies in float (slower, a little closer to PyTorch).
COMPUTE = {"int8": 4, "fp32": 1}


def quantize_graph(src: Path, out_dir: Path, bits: int, *, compute: str = "int8") -> Path:
    """Weight-only INT8/INT4 copy of ``src`` (MatMulNBits, symmetric, blocks of 32) in ``out_dir``."""
    if compute not in COMPUTE:
        raise BadInputError(f"unknown compute {compute!r}", field="compute", hint=f"one of {', '.join(COMPUTE)}")
    if bits not in (4, 8):
        raise BadInputError(f"{bits}-bit weights are not offered", field="format", hint="onnx-int8 or onnx-int4")
    onnx = _need("onnx", "quantization")
    _need("onnxruntime", "quantization")
    from onnxruntime.quantization.matmul_nbits_quantizer import (  # type: ignore[import-untyped]
        MatMulNBitsQuantizer,
    )

    with _quiet():
        model = onnx.load(str(src))
        quant = MatMulNBitsQuantizer(
            model, bits=bits, block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=COMPUTE[compute]
        )
        quant.process()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / GRAPH
    onnx.save_model(quant.model.model, str(target), save_as_external_data=True, location=f"{GRAPH}.data")
    return target


class OrtCausalLM:
    """The exported graph under onnxruntime (CPU): full logits, cached greedy decoding, timings."""

    def __init__(self, graph: Path, config: Any, *, threads: int = 1) -> None:
        ort = _need("onnxruntime", "running the exported model")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])
        self.shape = CacheShape.of(config)
        self.eos = getattr(config, "eos_token_id", None)

    def _empty(self, batch: int) -> dict[str, Any]:
        import numpy as np

        z = np.zeros((batch, self.shape.kv_heads, 0, self.shape.head_dim), dtype=np.float32)
        return {name: z for name in self.shape.input_names()}

    def step(self, ids: Any, past: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Logits of ``ids`` (``[batch, new]`` int64) after ``past``; returns the new cache."""
        import numpy as np

        past = past if past is not None else self._empty(ids.shape[0])
        done = next(iter(past.values())).shape[2]
        total = done + ids.shape[1]
        feeds = {
            "input_ids": ids.astype(np.int64),
            "attention_mask": np.ones((ids.shape[0], total), dtype=np.int64),
            "position_ids": np.tile(np.arange(done, total, dtype=np.int64), (ids.shape[0], 1)),
            **past,
        }
        out = self.session.run(None, feeds)
        present = dict(zip(self.shape.input_names(), out[1:], strict=True))
        return out[0], present

    def greedy(self, prompt: list[int], n: int, *, stop_at_eos: bool = False) -> tuple[list[int], list[float]]:
        """Greedy continuation of ``prompt`` with the cache, and each decode step's seconds."""
        import numpy as np

        logits, past = self.step(np.array([prompt], dtype=np.int64), None)
        out: list[int] = []
        times: list[float] = []
        nxt = int(np.argmax(logits[0, -1]))
        for _ in range(n):
            if stop_at_eos and nxt == self.eos:
                break
            out.append(nxt)
            t = time.perf_counter()
            logits, past = self.step(np.array([[nxt]], dtype=np.int64), past)
            times.append(time.perf_counter() - t)
            nxt = int(np.argmax(logits[0, -1]))
        return out, times
