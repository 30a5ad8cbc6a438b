"""Chat: time to the first token of one question, cold and warm, against a bare transformers loop.

Run from the repository root::

    python benchmarks/bench_chat.py [--repeat 3] [--max-new-tokens 16] [--pick-seconds 12]

Builds the tests' tiny Llama (``tests/_tiny.py``: about 520 KiB of weights), imports it into a
fresh store as ``hf:bench/tiny``, starts one ``jupyter server`` with the extension, then measures,
interleaved so load affects every row alike (medians of ``--repeat``):

- ``bare transformers`` (the baseline): a fresh ``python -c`` that imports torch and transformers,
  loads the tokenizer and model with ``from_pretrained`` and runs a greedy loop with the KV cache,
  printing each token as it comes; its warm figure is its first token after the load, in-process;
- ``starverse chat hf:bench/tiny --prompt``: the CLI, a fresh process, first answer byte on its
  stdout (cold: worker start and model load included) and its end;
- REST, what the panel does: ``POST chat/sessions`` then ``POST .../turns`` and polling the turn
  (every 20 ms here; the panel polls every 150 ms) until its first piece. ``cold``: no spare
  worker; ``after the picker``: ``GET chat/models`` first (the panel's chat section lists the
  models and a spare worker imports torch meanwhile), then ``--pick-seconds`` for the user to
  pick, then the same; ``warm``: the next question of that session.

For each row: the median time to the first token and to the end, the ratio to the baseline's,
the CPU seconds of the process and its children where it is one process tree (steadier than wall
time on a loaded machine), and the worker's own load phases (imports, tokenizer, model).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._jupyter import JupyterServer as Server  # noqa: E402

PROMPT = "How many cards do I need?"
MODEL = "hf:bench/tiny"

_BARE = """
import sys, time
t0 = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
t1 = time.perf_counter()
torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
t2 = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
t3 = time.perf_counter()
ids = tok.apply_chat_template([{"role": "user", "content": sys.argv[2]}], add_generation_prompt=True, tokenize=True)
ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "input_ids") else ids
past, out, step, t4 = None, [], torch.tensor([list(ids)]), None
import inspect
kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
with torch.no_grad():
    for i in range(int(sys.argv[3])):
        res = model(input_ids=step, use_cache=True, **{kw: past})
        past = res.past_key_values
        nxt = int(torch.argmax(res.logits[0, -1]))
        if nxt == tok.eos_token_id:
            break
        out.append(nxt)
        sys.stdout.write(tok.decode([nxt]) or " ")
        sys.stdout.flush()
        if t4 is None:
            t4 = time.perf_counter()
        step = torch.tensor([[nxt]])
print(f"phases imports {t1 - t0:.2f} s, tokenizer {t2 - t1:.2f} s, model {t3 - t2:.2f} s, "
      f"first token after the load {(t4 or t3) - t3:.3f} s", file=sys.stderr)
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _first_byte(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """A fresh process: seconds to the first byte of its stdout, to its end, CPU seconds, stderr."""
    before = _cpu()
    start = time.perf_counter()
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(1)
        first_at = time.perf_counter() - start
        rest = proc.stdout.read()
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait() != 0 or not (first + rest).strip():
            raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {err[-2000:]}")
    total = time.perf_counter() - start
    return {"first": first_at, "end": total, "cpu": _cpu() - before, "err": err}


def _ask(server: Server, session: str, tokens: int, started: float) -> tuple[float, float]:
    """One question over REST, polled as the panel does: (seconds to the first piece, to the end) from ``started``."""
    base = f"/jupyter-starverse/chat/sessions/{session}/turns"
    turn = server.call("POST", base, {"messages": [{"role": "user", "content": PROMPT}], "max_new_tokens": tokens})
    first = None
    while True:
        if turn["pieces"] and first is None:
            first = time.perf_counter() - started
        if turn["done"]:
            if turn["error"] or first is None:
                raise SystemExit(f"the REST chat answered nothing: {turn}")
            return first, time.perf_counter() - started
        time.sleep(0.02)
        turn = server.call("GET", f"{base}/{turn['id']}?after=0")


def _rest(server: Server, tokens: int, *, pick: float | None) -> dict[str, Any]:
    """A chat from the panel: (the picker listing the models and ``pick`` seconds), Load, two questions."""
    if pick is not None:
        server.call("GET", "/jupyter-starverse/chat/models")
        time.sleep(pick)  # the user picks a model: the spare imports meanwhile
    start = time.perf_counter()
    session = server.call("POST", "/jupyter-starverse/chat/sessions", {"model": MODEL})
    first, end = _ask(server, session["id"], tokens, start)
    again = time.perf_counter()
    warm_first, warm_end = _ask(server, session["id"], tokens, again)
    server.call("DELETE", f"/jupyter-starverse/chat/sessions/{session['id']}")
    return {"first": first, "end": end, "warm_first": warm_first, "warm_end": warm_end,
            "load": session.get("load_seconds") or {}}  # fmt: skip


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--pick-seconds", type=float, default=12.0, help="the user's time to pick a model")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests._tiny import build_tiny_llama

    tmp = Path(tempfile.mkdtemp(prefix="sv-bench-chat-"))
    folder = build_tiny_llama(tmp / "tiny")
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    env.update(STARVERSE_HOME=str(tmp / "home"), STARVERSE_MODE="cpu", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               STARVERSE_USER="bench")  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cli = [sys.executable, "-m", "jupyter_starverse.cli"]
    subprocess.run([*cli, "store", "import-model", str(folder), "--as", "bench/tiny"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    snapshot = subprocess.run([*cli, "store", "mount", MODEL], env=env, check=True, capture_output=True, text=True)
    stored = Path(snapshot.stdout.strip().splitlines()[-1])
    n = str(args.max_new_tokens)
    server = Server(env, tmp)
    bare: list[dict[str, Any]] = []
    chat: list[dict[str, Any]] = []
    cold: list[dict[str, Any]] = []
    picked: list[dict[str, Any]] = []
    try:
        for _ in range(args.repeat):
            bare.append(_first_byte([sys.executable, "-c", _BARE, str(stored), PROMPT, n], env))
            chat.append(_first_byte([*cli, "chat", MODEL, "--prompt", PROMPT, "--max-new-tokens", n], env))
            cold.append(_rest(server, args.max_new_tokens, pick=None))
            picked.append(_rest(server, args.max_new_tokens, pick=args.pick_seconds))
    finally:
        server.close()
    for r in bare:
        line = [x for x in r["err"].splitlines() if x.startswith("phases")]
        r["phases"] = line[-1] if line else ""
        r["warm"] = float(r["phases"].rsplit(" ", 2)[-2]) if r["phases"] else float("nan")
    base = _median(bare, "first")
    base_warm = _median(bare, "warm")
    print(f"tiny Llama ({weights / 1024:.0f} KiB of weights) as {MODEL}, {args.max_new_tokens} new tokens, "
          f"prompt {PROMPT!r}; medians of {args.repeat}; machine load {os.getloadavg()[0]:.1f} "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"{'cold: from nothing loaded':<52} {'first token':>11} {'ratio':>6} {'end':>8} {'CPU s':>6}")

    def row(name: str, runs: list[dict[str, Any]], cpu: bool = True) -> None:
        first = _median(runs, "first")
        cpu_s = f"{_median(runs, 'cpu'):6.2f}" if cpu else f"{'-':>6}"
        print(f"{name:<52} {first:10.2f}s {first / base:5.2f}x {_median(runs, 'end'):7.2f}s {cpu_s}")

    row("bare transformers, one process (baseline)", bare)
    print(f"    {bare[-1]['phases']}")
    row(f"starverse chat {MODEL} --prompt", chat)
    row("REST: POST chat/sessions + turn, no spare", cold, cpu=False)
    print(f"    worker: {cold[-1]['load']}")
    row(f"REST: the same after GET chat/models (+{args.pick_seconds:g} s pick)", picked, cpu=False)
    print(f"    worker: {picked[-1]['load']}")
    print(f"{'warm: the model loaded':<52} {'first token':>11} {'ratio':>6} {'end':>8}")
    print(f"{'bare transformers, after its load (baseline)':<52} {base_warm:10.3f}s {1.0:5.2f}x")
    warm = cold + picked
    first_w = statistics.median(r["warm_first"] for r in warm)
    print(f"{'REST: the next question of a session':<52} {first_w:10.3f}s {first_w / base_warm:5.2f}x "
          f"{statistics.median(r['warm_end'] for r in warm):7.2f}s")  # fmt: skip


if __name__ == "__main__":
    main()
