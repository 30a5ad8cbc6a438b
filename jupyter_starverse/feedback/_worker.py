"""The chat worker process: loads one model and streams answers, one JSON line per piece.

Run as ``python -m jupyter_starverse.feedback._worker MODEL_FOLDER [IDLE_SECONDS]``; it outlives
no one: it stops when its stdin closes (the kernel or server that started it is gone), at once
(``os._exit`` once its output is flushed: an interpreter holding torch and transformers takes
seconds to tear down, which the one-prompt CLI would wait for). After IDLE_SECONDS without a
request it says ``{"idle": true}``; the session then closes its stdin unless a question is on its
way (the session's lock decides, so none is lost), and starts a new worker at the next question.

MODEL_FOLDER ``-`` starts a *spare*: it imports torch and transformers (most of a cold start),
says ``{"warm": true}`` and waits for ``{"load": FOLDER}`` as its first line, so a chat that
takes it pays only the model's load; a spare nobody takes exits after IDLE_SECONDS. Protocol,
JSON lines:

- in: ``{"id", "messages": [{"role", "content"}], "max_new_tokens", "temperature", "seed"}``
- out: ``{"ready": true, "model", "seconds": {"imports", "tokenizer", "model"}}`` once (what the
  load cost); per request ``{"id", "piece"}`` ... then ``{"id", "done": true, "text", "tokens",
  "seconds"}`` or ``{"id", "error"}``.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any


def _cache_kw(model: Any) -> str:
    """transformers 5.x renamed ``past_key_values`` to ``cache``; older versions know only the first."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _prompt_ids(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
    return [int(i) for i in tok(text)["input_ids"]]


def generate(model: Any, tok: Any, request: dict[str, Any]) -> None:
    """Stream one answer for ``request`` (greedy at temperature 0, else sampling)."""
    import torch

    rid = request.get("id")
    started = time.monotonic()
    max_new = int(request.get("max_new_tokens", 64))
    temperature = float(request.get("temperature", 0.0))
    gen = torch.Generator().manual_seed(int(request.get("seed", 0)))
    ids = torch.tensor([_prompt_ids(tok, request["messages"])])
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    limit = getattr(model.config, "max_position_embeddings", None)
    out: list[int] = []
    sent = ""
    past = None
    step_ids = ids
    with torch.no_grad():
        for _ in range(max_new):
            if limit is not None and ids.shape[1] + len(out) >= limit:
                break
            res = model(input_ids=step_ids, use_cache=True, **{_cache_kw(model): past})
            past = res.past_key_values
            logits = res.logits[0, -1].float()
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
            else:
                nxt = int(torch.argmax(logits))
            if nxt in eos:
                break
            out.append(nxt)
            text = tok.decode(out, skip_special_tokens=True)
            if not text.endswith("\ufffd") and text.startswith(sent) and len(text) > len(sent):
                _emit({"id": rid, "piece": text[len(sent) :]})
                sent = text
            step_ids = torch.tensor([[nxt]])
    text = tok.decode(out, skip_special_tokens=True)
    if len(text) > len(sent) and text.startswith(sent):
        _emit({"id": rid, "piece": text[len(sent) :]})
    _emit({"id": rid, "done": True, "text": text, "tokens": len(out), "seconds": time.monotonic() - started})


def _requests(idle: float) -> Iterator[str | None]:
    """The request lines on stdin until it closes; ``None`` each time none came for ``idle`` seconds (0: never).

    A reader thread feeds a queue, so a wait with a timeout never loses a line that stdin's buffer
    already holds (as ``select`` on the descriptor would).
    """
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, name="chat-requests", daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=idle if idle > 0 else None)
        except queue.Empty:
            yield None
            continue
        if line is None:  # stdin closed: the session ended
            return
        yield line


def _exit(code: int) -> None:
    """End now: output flushed, no interpreter teardown (nothing of ours needs it: no files open for writing)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _preload() -> None:
    """Import what loading any causal LM and its tokenizer imports. transformers loads its modules
    on first use, so ``from transformers import Auto...`` is cheap and ``from_pretrained`` pays
    for the rest (the model base class, torch.distributed.tensor, dynamo, the tokenizer classes,
    jinja2 for chat templates): seconds a spare worker pays before it is taken, not after."""
    import importlib

    import transformers

    for name in ("PreTrainedModel", "PreTrainedTokenizerFast", "GenerationMixin"):
        getattr(transformers, name, None)
    for module in ("transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto", "jinja2"):
        try:
            importlib.import_module(module)
        except ImportError:  # an older transformers, or no chat templates: the load imports what it needs
            pass


def _load_request(line: str | None) -> str | None:
    """The folder a spare's first line names (``{"load": FOLDER}``)."""
    try:
        folder = json.loads(line or "").get("load")
    except (ValueError, AttributeError):
        return None
    return folder if isinstance(folder, str) and folder else None


def main(argv: list[str]) -> int:
    folder = argv[0]
    idle = float(argv[1]) if len(argv) > 1 else 0.0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(int(os.environ.get("STARVERSE_CHAT_THREADS", "1")))
        _preload()
    except Exception as e:  # the parent shows this to the user
        _emit({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    seconds = {"imports": round(time.monotonic() - started, 3)}
    requests = _requests(idle)
    if folder == "-":  # a spare: warm, waiting for the model to load
        _emit({"warm": True, "seconds": seconds})
        line = next(requests, None)  # None: nobody took it within `idle` seconds, or its parent is gone
        if line is None:
            return 0
        named = _load_request(line)
        if named is None:
            _emit({"ready": False, "error": f"a spare worker's first line must be {{'load': FOLDER}}: {line[:100]!r}"})
            return 1
        folder = named
    try:
        mark = time.monotonic()
        tok = AutoTokenizer.from_pretrained(folder)
        seconds["tokenizer"] = round(time.monotonic() - mark, 3)
        mark = time.monotonic()
        model: Any = AutoModelForCausalLM.from_pretrained(folder)
        model.eval()
        seconds["model"] = round(time.monotonic() - mark, 3)
    except Exception as e:  # the parent shows this to the user
        _emit({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    _emit({"ready": True, "model": folder, "seconds": seconds})
    for line in requests:
        if line is None:  # nobody asked for `idle` seconds: offer to go (the session closes stdin if so)
            _emit({"idle": True, "seconds": idle})
            continue
        if not line.strip():
            continue
        request: dict[str, Any] = {}
        try:
            request = json.loads(line)
            generate(model, tok, request)
        except Exception as e:  # one bad request must not end the session
            _emit({"id": request.get("id"), "error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
