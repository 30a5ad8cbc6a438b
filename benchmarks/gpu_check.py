"""GPU check of the local backend: one script, for a machine with a CUDA GPU.

Runs, through the real CLI and LocalBackend:

1. the ddp template on 1 node x 1 GPU (nccl/cuda) for N steps, checkpointing;
2. the fsdp template on 1 node x 1 GPU;
3. a resume of run 1's experiment in CPU mode on 1 node x 2 processes (gloo): a change of
   device type *and* world size, restored from the torch distributed checkpoint;
4. a TensorRT-LLM engine build of a tiny Llama (`export --format tensorrt-llm`, a GPU job),
   skipped when NVIDIA's tensorrt_llm wheels are not installed.

Prints, per run: state, device seen by rank 0, first/last loss, steps/s, resume step.
Exit status 0 only if every run succeeded and the resume continued from the checkpoint.

Usage: ``python benchmarks/gpu_check.py [--steps 200] [--gpu h100-80g]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cli(env: dict[str, str], *argv: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_starverse.cli", *argv, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    if done.returncode not in (0,):
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    return json.loads(done.stdout) if done.stdout.strip().startswith(("{", "[")) else None


def metrics(exp_dir: str) -> list[dict[str, Any]]:
    path = Path(exp_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def logs(env: dict[str, str], job_id: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_starverse.cli", "jobs", "logs", job_id],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    return done.stdout


def run(env: dict[str, str], label: str, *argv: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    job = cli(env, "launch", *argv)
    if job is None:
        return {"label": label, "state": "submit failed"}
    final = cli(env, "jobs", "wait", job["id"]) or cli(env, "jobs", "show", job["id"]) or job
    wall = time.perf_counter() - t0
    points = [p for p in metrics(final["experiment_dir"]) if "loss" in p]
    text = logs(env, job["id"])
    steps = [p["step"] for p in points]
    out = {
        "label": label,
        "state": final.get("state"),
        "reason": final.get("reason"),
        "wall_s": round(wall, 1),
        "first_step": min(steps) if steps else None,
        "last_step": max(steps) if steps else None,
        "first_loss": points[0]["loss"] if points else None,
        "last_loss": points[-1]["loss"] if points else None,
        "cuda_in_logs": "cuda" in text,
        "nccl_in_logs": "nccl" in text.lower(),
        "experiment_dir": final.get("experiment_dir"),
    }
    if len(points) > 1 and points[-1].get("time") and points[0].get("time"):
        span = points[-1]["time"] - points[0]["time"]
        out["steps_per_s"] = round((points[-1]["step"] - points[0]["step"]) / span, 1)
    print(json.dumps(out), flush=True)
    if out["state"] != "succeeded":
        print(text[-4000:])
    return out


def tensorrt_llm_build(env: dict[str, str], gpu: str, home: str) -> dict[str, Any]:
    """4. `starverse export --format tensorrt-llm` of the tests' tiny Llama as a GPU job (skipped
    when NVIDIA's tensorrt_llm wheels are not installed: they come from NVIDIA's own index)."""
    import importlib.util

    if importlib.util.find_spec("tensorrt_llm") is None:
        out = {"label": "tensorrt-llm engine", "state": "skipped",
               "reason": "tensorrt_llm is not installed "
                         "(pip install --extra-index-url https://pypi.nvidia.com tensorrt-llm)"}
        print(json.dumps(out), flush=True)
        return out
    sys.path.insert(0, str(ROOT))
    from tests._tiny import build_tiny_llama

    folder = build_tiny_llama(Path(home) / "tiny-llama")
    cli(env, "store", "import-model", str(folder), "--as", "bench/tiny@main")
    t0 = time.perf_counter()
    job = cli(env, "export", "hf:bench/tiny@main", "--format", "tensorrt-llm", "--gpu", gpu, "--backend", "local")
    if job is None:
        return {"label": "tensorrt-llm engine", "state": "submit failed"}
    final = cli(env, "jobs", "wait", job["id"]) or job
    engine = Path(final.get("experiment_dir") or "", "output", "engine")
    out = {"label": "tensorrt-llm engine", "state": final.get("state"), "reason": final.get("reason"),
           "wall_s": round(time.perf_counter() - t0, 1), "engine_files": sorted(p.name for p in engine.glob("*"))}
    print(json.dumps(out), flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--gpu", default="h100-80g")
    ns = parser.parse_args()
    import torch

    print(json.dumps({"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                      "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
    home = tempfile.mkdtemp(prefix="sv-gpu-")
    env = {**os.environ, "STARVERSE_HOME": home, "STARVERSE_MODE": "gpu", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "4", "STARVERSE_GPU_TYPE": ns.gpu}
    steps = str(ns.steps)
    ddp = run(env, "ddp 1x1 gpu", "--template", "ddp", "--gpu", ns.gpu, "--nodes", "1", "--procs", "1",
              "--steps", steps, "--checkpoint-every", "50", "--experiment", "gpu-check", "--name", "gpu-ddp")
    fsdp = run(env, "fsdp 1x1 gpu", "--template", "fsdp", "--gpu", ns.gpu, "--nodes", "1", "--procs", "1",
               "--steps", steps, "--name", "gpu-fsdp")
    resume = run(env, "resume on cpu 1x2", "--template", "ddp", "--nodes", "1", "--procs", "2",
                 "--steps", str(ns.steps + 40), "--experiment", "gpu-check", "--resume", "--name", "cpu-resume")
    trt = tensorrt_llm_build(env, ns.gpu, home)
    ok = (
        trt["state"] in ("succeeded", "skipped")
        and ddp["state"] == fsdp["state"] == resume["state"] == "succeeded"
        and ddp["cuda_in_logs"]
        and (resume["first_step"] or 0) >= 50
    )
    print("GPU CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
