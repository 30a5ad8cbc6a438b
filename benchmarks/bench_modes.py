"""Modes: saving and restoring a kernel namespace across a switch, against plain torch.save/load.

Run from the repository root::

    python benchmarks/bench_modes.py [--repeat 5] [--mb 64]

Prints median times and ratios against a baseline measured in the same run:

- ``save_namespace`` + ``restore_namespace`` of a namespace holding a ``--mb`` MB tensor, a
  small trained model's state, and 1,000 small Python values (each pickled on its own so one
  bad value cannot spoil the others; small ones packed into one file; manifest; atomic
  publish), against ``torch.save`` + ``torch.load`` of the same objects as one dict into one
  file (the floor any save pays);
- ``make_workspace_patch`` for a workspace Deployment (the pure function behind a
  Kubernetes switch), in microseconds.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import median_ms, show_load  # noqa: E402
from jupyter_starverse.kube._pools import default_pools  # noqa: E402
from jupyter_starverse.modes import Mode, restore_namespace, save_namespace  # noqa: E402
from jupyter_starverse.modes._k8s import make_workspace_patch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    show_load()

    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ns: dict[str, object] = {
        "big": torch.randn(args.mb * 1024 * 1024 // 4),
        "model": model,
        "state": model.state_dict(),
        **{f"v{i}": {"i": i, "name": f"value {i}"} for i in range(1000)},
    }
    home = Path(tempfile.mkdtemp(prefix="bench-modes-"))

    def ours() -> None:
        save_namespace(ns, home=home)
        out: dict[str, object] = {}
        restore_namespace(out, home=home)
        assert len(out) == len(ns)

    def baseline() -> None:
        buf = io.BytesIO()
        torch.save(ns, buf)
        path = home / "baseline.pt"
        path.write_bytes(buf.getvalue())
        out = torch.load(io.BytesIO(path.read_bytes()), map_location="cpu", weights_only=False)
        assert len(out) == len(ns)

    base = median_ms(baseline, args.repeat)
    mine = median_ms(ours, args.repeat)
    print(f"namespace of {args.mb} MB + model + 1000 small values ({args.repeat} runs, median)")
    print(f"  torch.save+load, one file (baseline)   {base:8.1f} ms")
    print(f"  save_namespace+restore_namespace       {mine:8.1f} ms   ratio {mine / base:.2f}")

    deployment = {
        "kind": "Deployment",
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"starverse.io/pool": "a100-80g"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}],
                }
            }
        },
    }
    pools = default_pools()
    n = 2000
    patch_ms = median_ms(
        lambda: [make_workspace_patch(deployment, target=Mode("cpu"), pools=pools) for _ in range(n)], args.repeat
    )
    print(f"  make_workspace_patch                   {patch_ms * 1000 / n:8.1f} us per patch")


if __name__ == "__main__":
    main()
