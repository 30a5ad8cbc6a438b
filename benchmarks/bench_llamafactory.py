"""LLaMA-Factory on the tiny Llama: ``llamafactory-cli train`` directly vs the ``llamafactory-sft`` recipe
through our launcher, the same config, interleaved.

Run from the repository root, with LLaMA-Factory in its own environment (it pins its own transformers)::

    python -m venv LF && LF/bin/pip install torch==2.13.0 llamafactory==0.9.5
    python benchmarks/bench_llamafactory.py --llamafactory LF/bin/llamafactory-cli [--steps 20] [--procs 2]

In a temporary store it imports a tiny Llama (random weights, a BPE tokenizer) and a chat dataset. Each
round launches the recipe on the local backend (``--procs`` ranks under our torchrun, supervisor, worker
and monitor callback) and then runs LLaMA-Factory's own CLI (``FORCE_TORCHRUN=1 llamafactory-cli train``,
its torchrun) on the very ``train.yaml`` our launch rendered, only ``output_dir`` moved; the order
alternates between rounds so load drifts hit both. Per side it prints the median wall time (start to
exit), the median of the trainer's own ``train_steps_per_second`` (``train_results.json``), the ratio
ours / direct, the monitor's steps/loss/tokens/s for our side, and the machine load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import load  # noqa: E402


def _chat(n: int) -> list[dict[str, object]]:
    answers = ["two nodes with eight cards each.", "checkpoints every ten steps.", "the job resumes after preemption."]
    return [
        {
            "messages": [
                {"role": "user", "content": f"question {i}: how do we train?"},
                {"role": "assistant", "content": answers[i % len(answers)]},
            ]
        }
        for i in range(n)
    ]


def _results(output_dir: Path) -> dict[str, Any]:
    path = output_dir / "train_results.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--llamafactory", default=os.environ.get("STARVERSE_LLAMAFACTORY"), help="its llamafactory-cli")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps (the job's schedule)")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the temporary home and print it")
    args = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-lf-"))
    os.environ["STARVERSE_HOME"] = str(home / "sv")
    os.environ["STARVERSE_MODE"] = "cpu"
    os.environ["STARVERSE_WARM_POOL"] = "off"
    if args.llamafactory:
        os.environ["STARVERSE_LLAMAFACTORY"] = args.llamafactory

    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.experiments import read_metrics
    from jupyter_starverse.recipes._llamafactory import find_llamafactory
    from tests._tiny import build_tiny_llama

    settings = Settings.from_env()
    python = find_llamafactory(settings.llamafactory)
    if python is None:
        print("LLaMA-Factory is not installed: pass --llamafactory ENV/bin/llamafactory-cli", file=sys.stderr)
        return 2
    cli = Path(python).with_name("llamafactory-cli")
    client = Starverse(settings)
    build_tiny_llama(home / "tiny")
    client.catalog.import_model(home / "tiny", repo="tiny/llama")
    chat = home / "chat"
    chat.mkdir()
    (chat / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _chat(32)))
    client.catalog.add_dataset("chat", str(chat), version="v1")
    client.catalog.pull("chat@v1")
    params = {"steps": args.steps, "warmup_steps": 1, "global_batch": 4, "micro_batch": 2, "seq_len": 64, "lr": 1e-3}
    backend = client.backend("local")
    print(f"load before {load()}  cpus {os.cpu_count()}  llamafactory python: {python}", flush=True)

    walls: dict[str, list[float]] = {"ours": [], "direct": []}
    rates: dict[str, list[float]] = {"ours": [], "direct": []}
    monitor: list[str] = []
    yaml_text: str | None = None

    def ours(i: int) -> None:
        nonlocal yaml_text
        spec = client.recipes.spec(
            "llamafactory-sft", model="hf:tiny/llama", data="chat", name=f"lf-ours-{i}",
            procs_per_node=args.procs, checkpoint_every=args.every, params=params,
        )  # fmt: skip
        began = time.perf_counter()
        done = backend.wait(client.launch(spec).id, timeout=1800)
        walls["ours"].append(time.perf_counter() - began)
        if done.state.value != "succeeded":
            raise SystemExit(f"our launch failed: {done.reason}")
        run = Path(done.experiment_dir)
        yaml_text = yaml_text or (run / "llamafactory" / "train.yaml").read_text()
        rates["ours"].append(float(_results(run / "model").get("train_steps_per_second", 0.0)))
        points = read_metrics(run, from_logs=False)
        losses = [q.values["loss"] for q in points if "loss" in q.values]
        tps = [q.values["tokens_per_s"] for q in points if "tokens_per_s" in q.values]
        ckpts = sorted(d.name for d in (run / "model").glob("checkpoint-*"))
        monitor.append(
            f"round {i}: monitor steps {points[0].step}..{points[-1].step}  loss {losses[0]:.3f} -> {losses[-1]:.3f}"
            f"  tokens/s median {statistics.median(tps):.0f}  checkpoints {ckpts}"
        )

    def direct(i: int) -> None:
        assert yaml_text is not None
        config = json.loads(yaml_text)  # our train.yaml is JSON (JSON is YAML)
        out = home / f"direct-{i}"
        config["output_dir"] = str(out)
        path = home / f"direct-{i}.yaml"
        path.write_text(json.dumps(config, indent=1))
        env = {**os.environ, "FORCE_TORCHRUN": "1", "NNODES": "1", "NPROC_PER_NODE": str(args.procs)}
        env = {k: v for k, v in env.items() if not k.startswith("STARVERSE_")} | {"HF_HUB_OFFLINE": "1"}
        env["PATH"] = f"{cli.parent}{os.pathsep}{env.get('PATH', '')}"  # its CLI starts its own `torchrun`
        log = home / f"direct-{i}.log"
        began = time.perf_counter()
        with log.open("wb") as f:
            argv = [str(cli), "train", str(path)]
            code = subprocess.run(argv, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        walls["direct"].append(time.perf_counter() - began)
        if code != 0:
            raise SystemExit(f"llamafactory-cli train failed ({code}): see {log}")
        rates["direct"].append(float(_results(out).get("train_steps_per_second", 0.0)))
        shutil.rmtree(out, ignore_errors=True)

    ours(0)  # renders the config the direct runs reuse; a warm-up for the page cache of both
    walls["ours"].clear()
    rates["ours"].clear()
    monitor.clear()
    for i in range(args.rounds):
        for side in ("direct", "ours") if i % 2 == 0 else ("ours", "direct"):
            (direct if side == "direct" else ours)(i + 1)
            print(f"  round {i + 1} {side}: {walls[side][-1]:.1f} s", flush=True)

    print(f"\nllamafactory-sft, tiny Llama, {args.procs} CPU ranks, {args.steps} steps, {args.rounds} rounds")
    for side in ("direct", "ours"):
        print(
            f"  {side:6s}: wall median {statistics.median(walls[side]):6.1f} s  {[round(w, 1) for w in walls[side]]}"
            f"   trainer steps/s median {statistics.median(rates[side]):.2f}"
        )
    ratio = statistics.median(walls["ours"]) / statistics.median(walls["direct"])
    speed = statistics.median(rates["ours"]) / max(statistics.median(rates["direct"]), 1e-9)
    print(f"  ratio ours / direct: wall {ratio:.2f}x   trainer steps/s {speed:.2f}x")
    for line in monitor:
        print(f"  {line}")
    print(f"load after {load()}")
    if args.keep:
        print(f"home kept: {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
